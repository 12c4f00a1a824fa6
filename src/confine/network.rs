//! The network half of a confined command's policy (`network:`, docs/security.md,
//! "Network"): Landlock's TCP rules (ABI 4, Linux 6.7) for `none`, a list of ports and
//! `any`, and a network namespace of the command's own for `loopback` (and for `none`
//! where the kernel has no TCP rules).
//!
//! The serving server's own port is never reachable ([`forbid_port`]): under `any` a
//! second Landlock layer allows every port but it. That layer has 65,535 rules, so it is
//! built once per process (per set of forbidden ports) and each command restricts itself
//! with a duplicate of its descriptor.

use std::io;
use std::sync::{Mutex, PoisonError};

use landlock::{
    ABI, Access, AccessNet, NetPort, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetError,
};

use super::grant::Network;

/// Ports no command may connect to or listen on, whatever its grant: the server's.
static FORBIDDEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());

/// The shared `any` layer and the forbidden ports it was built for.
static ANY_LAYER: Mutex<Option<(Vec<u16>, RulesetCreated)>> = Mutex::new(None);

/// How many times this process built the `any` layer (65,535 rules each): once per set of
/// forbidden ports, however many commands start.
static ANY_LAYERS_BUILT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Keeps every command this process starts from then on away from TCP port `port` (what
/// `treadle serve` calls with its listening port).
pub fn forbid_port(port: u16) {
    let mut ports = FORBIDDEN.lock().unwrap_or_else(PoisonError::into_inner);
    if !ports.contains(&port) {
        ports.push(port);
        ports.sort_unstable();
    }
}

fn forbidden() -> Vec<u16> {
    FORBIDDEN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Whether the kernel filters TCP connections by port (Landlock ABI 4).
pub fn tcp_rules() -> bool {
    super::abi().is_some_and(|v| v >= 4)
}

/// Why a command cannot be given the network it asks for.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// A list of ports needs Landlock's TCP rules.
    #[error(
        "`network:` lists ports, which needs Landlock's TCP rules (Linux 6.7 or later); \
         this kernel has none: grant `network: any` or `loopback`, or run on a newer kernel"
    )]
    NoTcpRules,
    /// A CLI agent's `network:` needs TCP rules: a namespace of its own would hide
    /// treadle's loopback ports from it, its model proxy among them.
    #[error(
        "a CLI agent's `network: {0}` needs Landlock's TCP rules (Linux 6.7 or later), since \
         the CLI must still reach treadle's model proxy on loopback; this kernel has none: \
         grant the agent `network: any`, or run on a newer kernel"
    )]
    CliNoTcpRules(&'static str),
    /// The shared layer could not be built.
    #[error("cannot build the network rules: {0}")]
    Rules(#[from] RulesetError),
    /// Its descriptor could not be duplicated.
    #[error("cannot build the network rules: {0}")]
    Dup(io::Error),
}

/// A network namespace a command enters before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    /// One with no interface up: nothing reachable, nothing to listen on.
    Empty,
    /// One with its `lo` up: only the command's own listeners are reachable.
    Loopback,
}

/// How a command gets its network grant.
#[derive(Debug, Default)]
pub struct Plan {
    /// TCP ports the command's own ruleset allows (`Some(empty)`: none); `None`: its
    /// ruleset does not handle TCP.
    pub ports: Option<Vec<u16>>,
    /// The shared layer (every port but the forbidden ones), to restrict with as well.
    pub layer: Option<RulesetCreated>,
    /// A namespace to enter first.
    pub namespace: Option<Namespace>,
}

/// The plan for `network`.
pub fn plan(network: &Network) -> Result<Plan, NetworkError> {
    let tcp = tcp_rules();
    let forbidden = forbidden();
    Ok(match network {
        Network::None if tcp => Plan {
            ports: Some(Vec::new()),
            ..Plan::default()
        },
        Network::None => Plan {
            namespace: Some(Namespace::Empty),
            ..Plan::default()
        },
        Network::Ports(_) if !tcp => return Err(NetworkError::NoTcpRules),
        Network::Ports(list) => Plan {
            ports: Some(
                list.iter()
                    .map(|e| e.port)
                    .filter(|p| !forbidden.contains(p))
                    .collect(),
            ),
            ..Plan::default()
        },
        Network::Loopback => Plan {
            namespace: Some(Namespace::Loopback),
            ..Plan::default()
        },
        // A container network belongs to a step with `image:`, which fails before it runs.
        Network::Any | Network::Container(_) => Plan {
            layer: any_layer(&forbidden)?,
            ..Plan::default()
        },
    })
}

/// The plan for a CLI agent's `network`, beside which it always reaches `treadle_ports`
/// (treadle's model proxy and MCP bridge for it, on loopback): `none` and `loopback`
/// allow those ports alone (Landlock's TCP rules name ports, not hosts, and a namespace
/// would hide them), a list adds them, `any` is a task's `any`.
pub fn plan_beside(network: &Network, treadle_ports: &[u16]) -> Result<Plan, NetworkError> {
    let only = |mut ports: Vec<u16>| {
        ports.extend_from_slice(treadle_ports);
        ports.sort_unstable();
        ports.dedup();
        Ok(Plan {
            ports: Some(ports),
            ..Plan::default()
        })
    };
    match network {
        Network::Any | Network::Container(_) => plan(network),
        Network::None if tcp_rules() => only(Vec::new()),
        Network::Loopback if tcp_rules() => only(Vec::new()),
        Network::Ports(_) if tcp_rules() => only(plan(network)?.ports.unwrap_or_default()),
        Network::None => Err(NetworkError::CliNoTcpRules("none")),
        Network::Loopback => Err(NetworkError::CliNoTcpRules("loopback")),
        Network::Ports(_) => Err(NetworkError::NoTcpRules),
    }
}

/// A duplicate of the shared layer allowing every port but `forbidden`; `None` when there
/// is nothing to forbid or no TCP rules to do it with.
fn any_layer(forbidden: &[u16]) -> Result<Option<RulesetCreated>, NetworkError> {
    if forbidden.is_empty() || !tcp_rules() {
        return Ok(None);
    }
    let mut slot = ANY_LAYER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((ports, layer)) = slot.as_ref()
        && ports == forbidden
    {
        return layer.try_clone().map(Some).map_err(NetworkError::Dup);
    }
    ANY_LAYERS_BUILT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let all = AccessNet::from_all(ABI::V4);
    let mut layer = Ruleset::default().handle_access(all)?.create()?;
    for port in (0..=u16::MAX).filter(|p| !forbidden.contains(p)) {
        layer = layer.add_rule(NetPort::new(port, all))?;
    }
    let copy = layer.try_clone().map_err(NetworkError::Dup)?;
    *slot = Some((forbidden.to_vec(), layer));
    Ok(Some(copy))
}

/// Adds `plan`'s TCP handling to a command's own ruleset (before it is created).
pub fn handle(ruleset: Ruleset, plan: &Plan) -> Result<Ruleset, RulesetError> {
    if plan.ports.is_some() {
        ruleset.handle_access(AccessNet::from_all(ABI::V4))
    } else {
        Ok(ruleset)
    }
}

/// Adds `plan`'s allowed ports to a command's own (created) ruleset.
pub fn allow(mut ruleset: RulesetCreated, plan: &Plan) -> Result<RulesetCreated, RulesetError> {
    let all = AccessNet::from_all(ABI::V4);
    for &port in plan.ports.iter().flatten() {
        ruleset = ruleset.add_rule(NetPort::new(port, all))?;
    }
    Ok(ruleset)
}

/// Between fork and exec: moves the calling process into a network namespace of its own
/// (with `lo` up for [`Namespace::Loopback`]). Without the right to make one directly
/// (not root), it makes a user namespace too, mapping its own user and group onto
/// themselves. Makes system calls only; allocates only to report an error.
pub fn enter(namespace: Namespace) -> io::Result<()> {
    // SAFETY: unshare, getuid, getgid and the writes below take plain arguments and
    // buffers on this stack.
    unsafe {
        let (uid, gid) = (libc::getuid(), libc::getgid());
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                let err = io::Error::last_os_error();
                return Err(io::Error::other(format!(
                    "`network: {}` needs a network namespace of the command's own, and \
                     this system refuses one ({err}); grant `network: any` or a list of ports",
                    if namespace == Namespace::Loopback {
                        "loopback"
                    } else {
                        "none"
                    }
                )));
            }
            map_self(uid, gid)?;
        }
        if namespace == Namespace::Loopback {
            loopback_up()?;
        }
    }
    Ok(())
}

/// In a user namespace just made: maps the caller's user and group (`uid`, `gid`, read
/// before it was made) onto themselves, so files keep their owners.
///
/// The caller is made dumpable first: a process that is not (treadle's forks inherit
/// `crate::environ::take_keys`'s `PR_SET_DUMPABLE` 0) has its `/proc/self` files owned by
/// root, and a user other than root could not write its maps. The exec that follows
/// replaces the memory that flag protected.
///
/// # Safety
///
/// Between fork and exec only, in the process that execs the command (never the keeper,
/// whose memory, a copy of treadle's, stays).
pub(super) unsafe fn map_self(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: per this function's contract; prctl takes plain integers.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
        write_file(b"/proc/self/setgroups\0", b"deny")?;
        write_map(b"/proc/self/uid_map\0", uid)?;
        write_map(b"/proc/self/gid_map\0", gid)
    }
}

/// Writes `id id 1` to a map file.
///
/// # Safety
///
/// Between fork and exec only.
unsafe fn write_map(path: &[u8], id: u32) -> io::Result<()> {
    let mut digits = [0u8; 10];
    let mut n = id;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut line = [0u8; 24];
    let mut at = 0;
    for _ in 0..2 {
        for i in (0..len).rev() {
            line[at] = digits[i];
            at += 1;
        }
        line[at] = b' ';
        at += 1;
    }
    line[at] = b'1';
    at += 1;
    // SAFETY: per this function's contract.
    unsafe { write_file(path, &line[..at]) }
}

/// Writes `bytes` to the NUL-terminated `path`.
///
/// # Safety
///
/// Between fork and exec only.
unsafe fn write_file(path: &[u8], bytes: &[u8]) -> io::Result<()> {
    // SAFETY: open/write/close with a NUL-terminated path and a buffer on the caller's stack.
    unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n < 0 { Err(err) } else { Ok(()) }
    }
}

/// Sets `lo` up in the calling process's network namespace.
///
/// # Safety
///
/// Between fork and exec only.
unsafe fn loopback_up() -> io::Result<()> {
    // SAFETY: socket/ioctl/close with an `ifreq` on this stack.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut ok = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) == 0;
        if ok {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            ok = libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) == 0;
        }
        let err = io::Error::last_os_error();
        libc::close(sock);
        if ok { Ok(()) } else { Err(err) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_any_layer_is_built_once_and_copied() {
        if !tcp_rules() {
            crate::console::tell!("SKIP: no Landlock TCP rules");
            return;
        }
        // Port 9 (discard): forbidding it affects no other test of this process.
        forbid_port(9);
        let built = || ANY_LAYERS_BUILT.load(std::sync::atomic::Ordering::Relaxed);
        let first = plan(&Network::Any).unwrap();
        let after_first = built();
        let second = plan(&Network::Any).unwrap();
        let third = plan(&Network::Any).unwrap();
        assert!(first.layer.is_some() && second.layer.is_some() && third.layer.is_some());
        assert!(after_first >= 1, "the first command's plan built the layer");
        assert_eq!(
            built(),
            after_first,
            "later plans copy the layer, never build it again"
        );
    }
}
