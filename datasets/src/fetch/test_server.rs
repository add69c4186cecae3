//! A minimal HTTP/1.1 file server on 127.0.0.1 for the fetch tests (std only; the workbench's
//! tests include this file too). It serves byte strings by path, answers `Range: bytes=N-`
//! with `206 Partial Content`, can cut a response off after some bytes (announcing the full
//! length, like a connection that breaks), can ignore ranges, and logs every request.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// How one path is served.
#[derive(Clone, Debug, Default)]
pub struct Route {
    /// The file's bytes.
    pub body: Vec<u8>,
    /// Close the connection after this many body bytes, on the first `cut_times` requests.
    pub cut_after: Option<usize>,
    /// How many requests are cut off.
    pub cut_times: usize,
    /// Answer every request with the whole file (`200`), as a server without ranges does.
    pub ignore_range: bool,
}

impl Route {
    /// The file served whole.
    pub fn file(body: Vec<u8>) -> Route {
        Route { body, ..Route::default() }
    }

    /// The file, with the first `times` responses cut off after `bytes` bytes.
    pub fn cut(body: Vec<u8>, bytes: usize, times: usize) -> Route {
        Route { body, cut_after: Some(bytes), cut_times: times, ignore_range: false }
    }
}

/// One request the server received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged {
    /// The request path.
    pub path: String,
    /// The `Range` header, if any.
    pub range: Option<String>,
}

/// A running server; it lives as long as the test process.
pub struct Server {
    /// The base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    routes: Arc<Mutex<HashMap<String, Route>>>,
    log: Arc<Mutex<Vec<Logged>>>,
}

impl Server {
    /// Starts serving `routes` (path such as `/cifar-10-binary.tar.gz` -> route).
    pub fn start(routes: Vec<(&str, Route)>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let routes = Arc::new(Mutex::new(routes.into_iter().map(|(p, r)| (p.to_string(), r)).collect()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (shared_routes, shared_log) = (Arc::clone(&routes), Arc::clone(&log));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (routes, log) = (Arc::clone(&shared_routes), Arc::clone(&shared_log));
                std::thread::spawn(move || {
                    let _ = serve(stream, &routes, &log);
                });
            }
        });
        Server { url, routes, log }
    }

    /// Replaces (or adds) the route of `path`.
    pub fn set(&self, path: &str, route: Route) {
        self.routes.lock().unwrap().insert(path.to_string(), route);
    }

    /// The requests received so far.
    pub fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, routes: &Mutex<HashMap<String, Route>>, log: &Mutex<Vec<Logged>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("/");
    let path = target.split('?').next().unwrap_or("/").to_string();
    let mut range = None;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("range") {
                range = Some(value.trim().to_string());
            }
        }
    }
    log.lock().unwrap().push(Logged { path: path.clone(), range: range.clone() });
    let route = {
        let mut routes = routes.lock().unwrap();
        match routes.get_mut(&path) {
            Some(route) => {
                let served = route.clone();
                route.cut_times = route.cut_times.saturating_sub(1);
                Some(served)
            }
            None => None,
        }
    };
    let mut stream = stream;
    let Some(route) = route else {
        write!(stream, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        return Ok(());
    };
    let total = route.body.len();
    let start = match range.as_deref().and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse::<usize>().ok())
    {
        Some(start) if !route.ignore_range => start,
        _ => 0,
    };
    if start >= total && start > 0 {
        write!(
            stream,
            "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{total}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        return Ok(());
    }
    let body = &route.body[start..];
    if start > 0 {
        write!(stream, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{total}\r\n", total - 1)?;
    } else {
        write!(stream, "HTTP/1.1 200 OK\r\n")?;
    }
    write!(
        stream,
        "Content-Length: {}\r\nContent-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    let send = match (route.cut_after, route.cut_times) {
        (Some(cut), times) if times > 0 => &body[..cut.min(body.len())],
        _ => body,
    };
    stream.write_all(send)?;
    stream.flush()?;
    stream.shutdown(Shutdown::Both)
}
