"""Two "machines" for multi-machine tests: two network namespaces joined by a veth pair, with an address each.

    with two_machines() as m:        # m is None where namespaces cannot be made (not root, no iproute2): skip
        m.addrs[i], m.prefix[i] (the argv prefix that runs a command in machine i), m.veth[i] (its interface)

Made with iproute2 (`ip netns`, scripts/setup.sh installs it) and removed on exit, the veth pair with them.
"""
import contextlib
import os
import shutil
import subprocess


class Machines:
    def __init__(self, ip, ns, veth, addrs):
        self.ip, self.ns, self.veth, self.addrs = ip, ns, veth, addrs
        self.prefix = [(ip, "netns", "exec", n) for n in ns]
        self.why_not = ""


@contextlib.contextmanager
def two_machines():
    """Yields Machines, or None (printing why) where namespaces are not possible here."""
    ip = shutil.which("ip") or "/usr/sbin/ip"
    if not os.path.exists(ip):
        print("SKIP: iproute2's `ip` is not installed (scripts/setup.sh installs it)")
        yield None
        return
    tag = f"{os.getpid() % 100000}"
    ns = [f"accmn{tag}a", f"accmn{tag}b"]
    veth = [f"accv{tag}a", f"accv{tag}b"]
    subnet = 10 + os.getpid() % 200
    addrs = [f"10.{subnet}.77.1", f"10.{subnet}.77.2"]

    def run(*cmd):
        return subprocess.run([ip, *cmd], capture_output=True, text=True, timeout=30)

    r = run("netns", "add", ns[0])
    if r.returncode != 0:
        print(f"SKIP: network namespaces are not allowed here ({r.stderr.strip()})")
        yield None
        return
    try:
        steps = [("netns", "add", ns[1]),
                 ("link", "add", veth[0], "type", "veth", "peer", "name", veth[1]),
                 ("link", "set", veth[0], "netns", ns[0]),
                 ("link", "set", veth[1], "netns", ns[1])]
        for i in range(2):
            steps += [("-n", ns[i], "addr", "add", addrs[i] + "/24", "dev", veth[i]),
                      ("-n", ns[i], "link", "set", veth[i], "up"),
                      ("-n", ns[i], "link", "set", "lo", "up")]
        for cmd in steps:
            r = run(*cmd)
            if r.returncode != 0:
                print(f"SKIP: cannot set up the namespaces: ip {' '.join(cmd)}: {r.stderr.strip()}")
                yield None
                return
        yield Machines(ip, ns, veth, addrs)
    finally:
        for n in ns:
            run("netns", "del", n)  # removes the veth pair with it
