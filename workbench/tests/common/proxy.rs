//! A TCP proxy on 127.0.0.1 that a test cuts and restores: the network between some clients
//! and a server, cut while the server and its other clients go on.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a forwarding thread looks at the cut flag while no data passes.
const POLL: Duration = Duration::from_millis(50);

/// Forwards every connection made to [`port`](Self::port) to the target; while cut, open
/// connections are closed and new ones are closed as soon as they are accepted.
pub struct CuttableProxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
}

impl CuttableProxy {
    pub fn start(target: SocketAddr) -> CuttableProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if flag.load(Ordering::Relaxed) {
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect(target) else { continue };
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (from, to, flag) = (from.try_clone().unwrap(), to.try_clone().unwrap(), flag.clone());
                    std::thread::spawn(move || pump(from, to, &flag));
                }
            }
        });
        CuttableProxy { port, cut }
    }

    /// Cuts (`true`) or restores (`false`) the network through the proxy.
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::Relaxed);
    }
}

/// Copies `from` to `to` until either side closes or the network is cut, then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream, cut: &AtomicBool) {
    from.set_read_timeout(Some(POLL)).unwrap();
    let mut buffer = [0u8; 16 * 1024];
    while !cut.load(Ordering::Relaxed) {
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
