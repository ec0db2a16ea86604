"""The network namespace holding the tap between rxu and the guest. Its
only addresses are 10.99.0.1 (host side, rxu) and 10.99.0.2 (guest); it has
no route out, so no packet of the interop run leaves it."""

import json

from .proc import run

NAME = "rxu-interop"
TAP = "rxitap0"
HOST_IP = "10.99.0.1"
GUEST_IP = "10.99.0.2"


def argv(*cmd):
    """A command run inside the namespace."""
    return ["ip", "netns", "exec", NAME, *cmd]


def create(mtu):
    destroy()
    run(["ip", "netns", "add", NAME])
    run(["ip", "-n", NAME, "link", "set", "lo", "up"])
    run(["ip", "-n", NAME, "tuntap", "add", "dev", TAP, "mode", "tap"])
    run(["ip", "-n", NAME, "addr", "add", f"{HOST_IP}/24", "dev", TAP])
    run(["ip", "-n", NAME, "link", "set", TAP, "mtu", str(mtu), "up"])


def destroy():
    r = run(["ip", "netns", "list"], check=False)
    if any(line.split()[:1] == [NAME] for line in r.stdout.splitlines()):
        # The tap goes with the namespace.
        run(["ip", "netns", "del", NAME], check=False)


def set_mtu(mtu):
    run(["ip", "-n", NAME, "link", "set", TAP, "mtu", str(mtu)])


def tap_tx_dropped():
    """Packets the tap dropped on their way to the guest (its queue full):
    tcpdump saw them, the guest never did."""
    r = run(["ip", "-j", "-s", "-n", NAME, "link", "show", "dev", TAP], check=False)
    try:
        return int(json.loads(r.stdout)[0]["stats64"]["tx"]["dropped"])
    except (ValueError, LookupError, TypeError):
        return 0
