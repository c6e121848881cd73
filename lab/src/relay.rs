//! Plumbing for the link's tests: a [`Relay`] that listens inside a machine's namespace and
//! carries each connection to an address outside it (so a node in a namespace of its own reaches
//! the broker without any interface added to the host), which can be cut like a network that went
//! away; and a [`Hung`] listener that accepts and never answers, like a connection that will never
//! return (a suspended machine's socket, a black-holed path).

use crate::error::{Error, Result};
use crate::machine::Machine;
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn listen_in(machine: &Machine) -> Result<TcpListener> {
    listen_at(machine, 0)
}

fn listen_at(machine: &Machine, port: u16) -> Result<TcpListener> {
    let at = format!("127.0.0.1:{port}");
    let l = machine
        .in_namespace(|| TcpListener::bind(at.as_str()))?
        .map_err(|e| Error::io(&at, e))?;
    l.set_nonblocking(true).map_err(|e| Error::io(&at, e))?;
    Ok(l)
}

/// A TCP relay from `127.0.0.1:port` inside a machine to an address outside it.
pub struct Relay {
    port: u16,
    stop: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    pub fn start(machine: &Machine, to: SocketAddr) -> Result<Relay> {
        Self::serve(listen_in(machine)?, to)
    }

    /// A relay on `port` inside the machine: the network back where a cut one was (the node's
    /// stored address is the same).
    pub fn start_at(machine: &Machine, port: u16, to: SocketAddr) -> Result<Relay> {
        Self::serve(listen_at(machine, port)?, to)
    }

    fn serve(listener: TcpListener, to: SocketAddr) -> Result<Relay> {
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("relay", e))?
            .port();
        let stop = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
        let (s, l) = (stop.clone(), live.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((inside, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = inside.set_nonblocking(false);
                let Ok(outside) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
                    continue;
                };
                for (a, b) in [(&inside, &outside), (&outside, &inside)] {
                    let (Ok(mut a), Ok(mut b)) = (a.try_clone(), b.try_clone()) else {
                        continue;
                    };
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut a, &mut b);
                        let _ = b.shutdown(Shutdown::Write);
                    });
                }
                if let Ok(mut v) = l.lock() {
                    v.push(inside);
                    v.push(outside);
                }
            }
            // The listener is dropped here: new connections are refused from now on.
        });
        Ok(Relay { port, stop, live })
    }

    /// `127.0.0.1:PORT` as seen from inside the machine.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cuts the relay like a network that went away: no new connection, every live one reset.
    pub fn cut(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(mut v) = self.live.lock() {
            for s in v.drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        // Wait for the accept loop to drop its listener.
        std::thread::sleep(Duration::from_millis(30));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}

/// A listener that accepts connections and never sends a byte.
pub struct Hung {
    port: u16,
    accepted: Arc<Mutex<Vec<(Instant, TcpStream)>>>,
    stop: Arc<AtomicBool>,
}

impl Hung {
    pub fn start(machine: &Machine) -> Result<Hung> {
        let listener = listen_in(machine)?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("hung listener", e))?
            .port();
        let accepted: Arc<Mutex<Vec<(Instant, TcpStream)>>> = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let _ = c.set_nonblocking(false);
                        if let Ok(mut v) = a.lock() {
                            v.push((Instant::now(), c));
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Hung {
            port,
            accepted,
            stop,
        })
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// How many connections it has accepted.
    pub fn accepted(&self) -> usize {
        self.accepted.lock().map(|v| v.len()).unwrap_or(0)
    }

    /// Waits until `n` connections were accepted.
    pub fn wait_accepted(&self, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.accepted() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Waits until the client closed connection `i` (the accepted side reads end of file or a
    /// reset); returns how long after `since` that was seen, or None if not within `within`.
    /// Whatever the client sent first (a TLS ClientHello) is read and dropped.
    pub fn wait_closed(&self, i: usize, since: Instant, within: Duration) -> Option<Duration> {
        let mut s = self.accepted.lock().ok()?.get(i)?.1.try_clone().ok()?;
        let deadline = Instant::now() + within;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .ok()?;
            match s.read(&mut buf) {
                Ok(0) => return Some(since.elapsed()),
                Ok(_) => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return None
                }
                Err(_) => return Some(since.elapsed()),
            }
        }
    }
}

impl Drop for Hung {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
