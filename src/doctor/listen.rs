//! The address `deepcli up` listens on: free, taken by the controller already running on this
//! state directory (then it is up, which is no failure), or taken by something else.

use std::net::SocketAddr;

use super::{Area, Check, Status};

/// The controller holding the state directory's lease, as the state records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Controller {
    pub pid: u32,
    /// Where it recorded that it listens.
    pub addr: Option<SocketAddr>,
}

/// Whether `taken` (an address in use) is where `controller` listens: the same port, and the
/// same address or one of the two the unspecified one.
fn is_its(taken: SocketAddr, controller: &Controller) -> bool {
    controller.addr.is_some_and(|addr| {
        addr.port() == taken.port()
            && (addr.ip() == taken.ip()
                || addr.ip().is_unspecified()
                || taken.ip().is_unspecified())
    })
}

pub(super) fn check(listen: SocketAddr, controller: Option<&Controller>) -> Check {
    let subject = listen.to_string();
    let elsewhere = controller
        .and_then(|c| Some((c.pid, c.addr?)))
        .filter(|(_, addr)| *addr != listen)
        .map(|(pid, addr)| {
            format!(" (the controller on this state directory, pid {pid}, listens on {addr})")
        })
        .unwrap_or_default();
    match std::net::TcpListener::bind(listen) {
        Ok(_) => Check::ok(Area::Listen, subject, format!("free{elsewhere}")),
        Err(e) => match controller {
            Some(c) if is_its(listen, c) => Check::ok(
                Area::Listen,
                subject,
                format!(
                    "taken by the deepcli controller running on this state directory (pid {}): the hub is up",
                    c.pid
                ),
            ),
            _ if e.kind() == std::io::ErrorKind::AddrInUse => Check::new(
                Area::Listen,
                subject,
                Status::Fail,
                format!("taken by another process{elsewhere}"),
            )
            .fix(format!(
                "stop what listens there (`ss -ltnp 'sport = :{}'` names it), or start deepcli on another address: `deepcli up --listen 127.0.0.1:PORT` (and `deepcli doctor --listen` the same)",
                listen.port()
            )),
            _ => Check::new(
                Area::Listen,
                subject,
                Status::Fail,
                format!("cannot be listened on: {e}"),
            )
            .fix("pick an address of this host: `deepcli up --listen 127.0.0.1:PORT`"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_in_use_is_a_failure_unless_the_controller_of_this_state_holds_it() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let check = check(addr, None);
        assert_eq!(check.status, Status::Fail, "{check:?}");
        assert!(
            check.message.starts_with("taken by another process"),
            "{check:?}"
        );
        let ours = Controller {
            pid: 42,
            addr: Some(addr),
        };
        let check = super::check(addr, Some(&ours));
        assert_eq!(check.status, Status::Ok, "{check:?}");
        assert!(check.message.contains("pid 42"), "{check:?}");
        let unspecified = Controller {
            pid: 42,
            addr: Some(SocketAddr::from(([0, 0, 0, 0], addr.port()))),
        };
        assert_eq!(super::check(addr, Some(&unspecified)).status, Status::Ok);
        drop(held);
        let free = super::check(addr, None);
        assert_eq!((free.status, free.message.as_str()), (Status::Ok, "free"));
    }
}
