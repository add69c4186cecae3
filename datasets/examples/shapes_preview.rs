//! Writes a PNG grid of generated shapes images: one row per class, `PER_CLASS` columns.
//!
//! Run with `cargo run --release -p datasets --example shapes_preview [OUT.png] [PER_CLASS] [SEED] [SCALE]`
//! (defaults: `shapes.png`, 12 images per class, seed 1 (the task's default `shapes_seed`),
//! each image scaled up 3 times).

use datasets::images::shapes::{self, Split, CLASSES, CLASS_NAMES, SIDE};
use std::fs::File;
use std::io::BufWriter;

fn main() {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| "shapes.png".into());
    let per_class = parse_arg(args.next(), "PER_CLASS", 12);
    let seed = parse_arg(args.next(), "SEED", 1) as u64;
    let scale = parse_arg(args.next(), "SCALE", 3).max(1);

    // Images i, i + 10, i + 20... are of class i.
    let set = shapes::generate(seed, Split::Train, per_class * CLASSES);
    let (cell, gap) = (SIDE * scale, 2);
    let (width, height) = (per_class * (cell + gap) + gap, CLASSES * (cell + gap) + gap);
    let mut rgb = vec![255u8; width * height * 3];
    for class in 0..CLASSES {
        for k in 0..per_class {
            let image = set.image(k * CLASSES + class);
            let (left, top) = (gap + k * (cell + gap), gap + class * (cell + gap));
            for y in 0..cell {
                for x in 0..cell {
                    let (sy, sx) = (y / scale, x / scale);
                    for c in 0..3 {
                        rgb[((top + y) * width + left + x) * 3 + c] = image[(c * SIDE + sy) * SIDE + sx];
                    }
                }
            }
        }
    }

    let file = File::create(&out).unwrap_or_else(|e| exit(&format!("cannot create {out}: {e}")));
    let mut encoder = png::Encoder::new(BufWriter::new(file), width as u32, height as u32);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let written = encoder.write_header().and_then(|mut writer| writer.write_image_data(&rgb));
    if let Err(e) = written {
        exit(&format!("cannot write {out}: {e}"));
    }
    println!("wrote {out}: rows are the classes {}", CLASS_NAMES.join(", "));
}

fn parse_arg(arg: Option<String>, name: &str, default: usize) -> usize {
    match arg {
        None => default,
        Some(text) => {
            text.parse().unwrap_or_else(|_| exit(&format!("{name} must be a non-negative integer, not `{text}`")))
        }
    }
}

fn exit(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(2)
}
