//! A server reached through a link that can be taken down silently: a network namespace of
//! the test's own, joined to the host by a veth pair, with the server's port forwarded
//! through it (two `socat`s: one in the namespace, one on the host end of the pair). Taking
//! the host end down makes every packet between the client and the namespace vanish — no
//! FIN, no RST — as a cable pulled or a firewall dropping state does.
//!
//! Needs root, `ip` (iproute2) and `socat`. Without them the test is skipped with a notice,
//! or fails loudly under `POOLER_REQUIRE_SERVICES=1`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A network namespace through which the server at `upstream` (on this host's loopback) is
/// reached at [`addr`](Blackhole::addr); removed, with its forwarders, when dropped.
pub struct Blackhole {
    ns: String,
    host_end: String,
    addr: SocketAddr,
    forwarders: Vec<Child>,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Blackhole {
    /// Sets the namespace up in front of `upstream`; `None` (the test skips) when this
    /// machine cannot.
    ///
    /// # Panics
    ///
    /// When it cannot and `POOLER_REQUIRE_SERVICES=1`.
    #[must_use]
    pub fn new(upstream: SocketAddr) -> Option<Blackhole> {
        let socat = Command::new("socat")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !socat {
            crate::cannot_run("socat (on the PATH)");
            return None;
        }
        // One slot of 250 per blackhole alive on the machine: tests in one binary run side
        // by side, each in a process of its own. Whoever adds the pair `pbh{n}a`/`pbh{n}b`
        // owns slot `n` (the kernel refuses a name taken), so two processes never share one,
        // whatever their ids; the search starts at a slot spread by process and call.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let first = std::process::id()
            .wrapping_mul(4)
            .wrapping_add(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let Some(n) = (0..250)
            .map(|i| (first.wrapping_add(i)) % 250 + 1)
            .find(|n| {
                ip(&[
                    "link",
                    "add",
                    &format!("pbh{n}a"),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &format!("pbh{n}b"),
                ])
            })
        else {
            crate::cannot_run("a network namespace (root and iproute2; a free slot)");
            return None;
        };
        let ns = format!("pooler-bh-{n}");
        let host_end = format!("pbh{n}a");
        let ns_end = format!("pbh{n}b");
        let host_ip = Ipv4Addr::new(10, 251, n as u8, 1);
        let ns_ip = Ipv4Addr::new(10, 251, n as u8, 2);
        // A namespace of this slot is a leftover of a run that died: a live blackhole holds
        // its pair until its namespace is gone (see `drop`).
        ip(&["netns", "del", &ns]);
        let host_cidr = format!("{host_ip}/30");
        let ns_cidr = format!("{ns_ip}/30");
        let made = ip(&["netns", "add", &ns])
            && ip(&["link", "set", &ns_end, "netns", &ns])
            && ip(&["addr", "add", &host_cidr, "dev", &host_end])
            && ip(&["link", "set", &host_end, "up"])
            && ip(&[
                "netns", "exec", &ns, "ip", "addr", "add", &ns_cidr, "dev", &ns_end,
            ])
            && ip(&["netns", "exec", &ns, "ip", "link", "set", &ns_end, "up"])
            && ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
        let mut hole = Blackhole {
            ns: ns.clone(),
            host_end,
            addr: SocketAddr::V4(SocketAddrV4::new(ns_ip, upstream.port())),
            forwarders: Vec::new(),
        };
        if !made {
            crate::cannot_run("a network namespace (root and iproute2)");
            return None;
        }
        // Host end: the pair's host address forwards to the server on loopback.
        let relay_port = 20_000 + u16::try_from(n).unwrap_or(0) * 7;
        let host_forward = Command::new("socat")
            .arg(format!(
                "TCP-LISTEN:{relay_port},bind={host_ip},reuseaddr,fork"
            ))
            .arg(format!("TCP:{upstream}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("socat on the host end");
        hole.forwarders.push(host_forward);
        // Namespace end: the server's port, forwarded back across the pair.
        let ns_forward = Command::new("ip")
            .args(["netns", "exec", &ns, "socat"])
            .arg(format!(
                "TCP-LISTEN:{},bind={ns_ip},reuseaddr,fork",
                upstream.port()
            ))
            .arg(format!("TCP:{host_ip}:{relay_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("socat in the namespace");
        hole.forwarders.push(ns_forward);
        // Both listening before anyone connects. A forwarder that could not listen (its
        // address taken) has exited: a connection would reach whatever holds the address.
        for _ in 0..100 {
            let up = std::net::TcpStream::connect_timeout(&hole.addr, Duration::from_millis(100))
                .is_ok();
            for (end, child) in ["host", "namespace"].iter().zip(&mut hole.forwarders) {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("the forwarder at the {end} end of {ns} exited: {status}");
                }
            }
            if up {
                return Some(hole);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the forwarders through {ns} did not come up");
    }

    /// A namespace in front of the server of `url` (its host an IP address): as
    /// [`new`](Blackhole::new).
    ///
    /// # Panics
    ///
    /// When the URL's host is not an IP address and a port, or as `new`.
    #[must_use]
    pub fn in_front_of(url: &str) -> Option<Blackhole> {
        let upstream: SocketAddr = crate::host_port(url)
            .parse()
            .expect("the server's address is an IP and a port");
        Blackhole::new(upstream)
    }

    /// Where the server is reached through the namespace.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes the link down (every packet across it vanishes silently) or brings it up.
    ///
    /// # Panics
    ///
    /// When `ip` fails.
    pub fn set_down(&self, down: bool) {
        let state = if down { "down" } else { "up" };
        assert!(
            ip(&["link", "set", &self.host_end, state]),
            "ip link set {state}"
        );
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        for child in &mut self.forwarders {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Forwarders forked per connection in the namespace die with it.
        let _ = Command::new("ip")
            .args(["netns", "pids", &self.ns])
            .output()
            .map(|out| {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
        // The namespace first: the pair goes with it, and only then is the slot free. Deleting
        // the pair first would free the slot while the namespace's name still stood, and a
        // blackhole of another process taking the slot would have its namespace deleted.
        ip(&["netns", "del", &self.ns]);
    }
}
