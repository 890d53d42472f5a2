//! The floor: plain blocking TCP between two processes, no framework. Its
//! round trip (write 100 bytes, read 100 bytes back) is what the machine
//! itself costs, thread wake-ups included; no actor framework can go below.

use super::{percentiles, Figures, ASK_N, ASK_WARMUP, BODY};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

#[allow(clippy::print_stdout)]
pub fn serve() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("READY {}", listener.local_addr().expect("address"));
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        std::thread::spawn(move || {
            conn.set_nodelay(true).expect("nodelay");
            let mut buf = [0u8; BODY];
            while conn.read_exact(&mut buf).is_ok() {
                if conn.write_all(&buf).is_err() {
                    return;
                }
            }
        });
    }
}

pub fn client(workload: &str, address: &str) -> Figures {
    if workload != "ask" {
        // One-way throughput of raw bytes says nothing about messaging.
        return Vec::new();
    }
    let mut conn = TcpStream::connect(address).expect("connect");
    conn.set_nodelay(true).expect("nodelay");
    let mut buf = [1u8; BODY];
    let mut rtts = Vec::with_capacity(ASK_N);
    for i in 0..(ASK_WARMUP + ASK_N) {
        let t = Instant::now();
        conn.write_all(&buf).expect("write");
        conn.read_exact(&mut buf).expect("read");
        if i >= ASK_WARMUP {
            rtts.push(t.elapsed());
        }
    }
    percentiles(rtts)
}
