//! `workbench plot` through the real binary: two tiny runs drawn to PNG and SVG.

use crate::common;

use common::{run, temp_dir, train_tiny, workbench};

#[test]
fn plots_two_runs_to_png_and_svg() {
    let dir = temp_dir("plot");
    // time_dim is a Hyper-SET key only.
    train_tiny(&dir, "hyperset", &["time_dim=8"]);
    train_tiny(&dir, "transformer", &[]);

    let png = dir.join("fig.png");
    let (code, stdout, stderr) = run(workbench(&dir).args([
        "plot",
        "--runs",
        "1,2",
        "--panels",
        "loss,energy,erank,angle,depth",
        "--size",
        "1200x700",
        "--out",
        png.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, 700));
    let pixels = &buf[..info.buffer_size()];
    let px = info.color_type.samples() * (info.bit_depth as usize / 8).max(1);
    let first = &pixels[..px];
    let distinct = pixels.chunks(px).filter(|c| *c != first).count();
    assert!(distinct > 1000, "the image is (almost) one flat colour: {distinct} differing pixels");

    // The ids may also come as arguments of their own, and the file after -o.
    let svg = dir.join("fig.svg");
    let (code, stdout, stderr) = run(workbench(&dir).args([
        "plot",
        "1",
        "2",
        "--panels",
        "loss,metric,energy,erank,angle,depth",
        "-o",
        svg.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the SVG is well-formed XML");
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.descendants().filter_map(|c| c.text()).collect::<String>())
        .collect();
    assert!(texts.iter().any(|t| t.contains("run 1: hyperset")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("run 2: transformer")), "{texts:?}");
    assert_eq!(doc.root_element().attribute("width"), Some("1600"));

    // Without --out: a PNG in the exports folder beside the store, named after the runs,
    // numbered rather than overwriting the first.
    for name in ["compare-runs-1-2.png", "compare-runs-1-2-2.png"] {
        let (code, stdout, stderr) = run(workbench(&dir).args(["plot", "2", "1", "--panels", "loss"]));
        assert_eq!(code, 0, "{stdout}{stderr}");
        let written = dir.join("exports").join(name);
        assert!(stdout.contains(&written.display().to_string()), "{stdout}");
        assert!(std::fs::metadata(&written).unwrap().len() > 1000, "{name} is a figure");
    }
}

#[test]
fn bad_extension_unknown_panel_and_unknown_run_are_refused() {
    let dir = temp_dir("plot-bad");
    let (code, _, stderr) = run(workbench(&dir).args(["plot", "--runs", "1", "--out", "fig.jpg"]));
    assert_eq!(code, 2, "a usage error: {stderr}");
    assert!(stderr.contains(".png") && stderr.contains(".svg"), "{stderr}");
    let (code, _, stderr) =
        run(workbench(&dir).args(["plot", "--runs", "1", "--panels", "loss,bogus", "--out", "f.png"]));
    assert_eq!(code, 2, "a usage error: {stderr}");
    assert!(
        stderr.contains("unknown panel `bogus`") && stderr.contains("loss, metric, energy, erank, angle, depth"),
        "{stderr}"
    );
    let (code, _, stderr) = run(workbench(&dir).args(["plot", "1", "--runs", "2", "--out", "f.png"]));
    assert_eq!(code, 2, "ids given both ways are a usage error: {stderr}");
    let (code, _, stderr) = run(workbench(&dir).args(["plot", "--out", "f.png"]));
    assert_eq!(code, 2, "no ids is a usage error: {stderr}");
    let (code, _, stderr) = run(workbench(&dir).args(["plot", "--runs", "42", "--out", "f.svg"]));
    assert_eq!(code, 1, "a missing run: {stderr}");
    assert!(stderr.contains("42"), "{stderr}");
    assert!(!dir.join("f.svg").exists());
    // A folder that does not exist is named, with the fix, before any run is read.
    let missing = dir.join("figures").join("f.png");
    let missing = missing.to_str().unwrap();
    for args in [
        &["plot", "--runs", "42", "--out", missing][..],
        &["plot", "--runs", "42", "--sphere", "--out", missing],
        &["ablation", "--runs", "42", "--out", missing],
    ] {
        let (code, _, stderr) = run(workbench(&dir).args(args));
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains("figures does not exist: create it, or choose another --out"), "{args:?}: {stderr}");
    }
    std::fs::write(dir.join("figures"), "").unwrap();
    let (code, _, stderr) = run(workbench(&dir).args(["plot", "--runs", "42", "--out", missing]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("figures is a file, not a folder: choose another --out"), "{stderr}");
}

/// Runs of one layer made by different builds of it are told apart in the legend, as in the
/// TUI's Compare screen: `hyperset@<build>`.
#[test]
fn legends_tag_runs_of_different_builds() {
    let dir = temp_dir("plot-builds");
    train_tiny(&dir, "hyperset", &["time_dim=8"]);
    train_tiny(&dir, "hyperset", &["time_dim=8"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}", dir.join("runs.db").display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query("UPDATE runs SET layer_build = 'feedbee0123' WHERE id = 2").execute(&pool).await.unwrap();
        pool.close().await;
    });
    let svg = dir.join("builds.svg");
    let (code, stdout, stderr) =
        run(workbench(&dir).args(["plot", "--runs", "1,2", "--panels", "loss", "--out", svg.to_str().unwrap()]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("run 2: hyperset@feedbee"), "no build tag in the legend");
    assert!(text.contains("run 1: hyperset@"), "the other build is not tagged");
}
