#!/usr/bin/env python3
"""Runs what systemd would run for one instance of a unit template, in a
chroot, for machines without systemd as PID 1 (scripts/test-deb):

    unit_exec.py ROOT UNIT_FILE INSTANCE start|stop|show

reads the [Service] section's EnvironmentFile= (in order, "-" = optional),
ExecStart= / ExecStop=, expands %i / %I and ${VAR} / $VAR as systemd does
for these simple cases, and executes the command lines with `chroot ROOT`
and exactly that environment (plus systemd's PATH). Anything it does not
understand (other specifiers, quoting, prefixes other than "-") is an
error, so the test cannot run something other than the unit."""

import re
import shlex
import subprocess
import sys

SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def service_section(path):
    out, section = [], None
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            m = re.fullmatch(r"\[(.+)\]", line)
            if m:
                section = m.group(1)
                continue
            if section == "Service":
                key, sep, value = line.partition("=")
                if not sep:
                    sys.exit(f"unit_exec: cannot read line {line!r}")
                out.append((key.strip(), value.strip()))
    return out


def specifiers(value, instance):
    def one(m):
        c = m.group(1)
        if c in "iI":
            return instance
        if c == "%":
            return "%"
        sys.exit(f"unit_exec: specifier %{c} not handled")

    return re.sub(r"%(.)", one, value)


def read_env_file(root, path, env):
    """systemd's EnvironmentFile=: KEY=VALUE, # and ; comments, optional
    double or single quotes around the whole value."""
    with open(root + path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", line)
            if not m:
                sys.exit(f"unit_exec: {path}:{n}: not KEY=VALUE: {line!r}")
            key, value = m.groups()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            env[key] = value


def command(value, env):
    ignore_failure = value.startswith("-")
    if ignore_failure:
        value = value[1:]
    if value[:1] in "@+!:|":
        sys.exit(f"unit_exec: Exec prefix {value[0]!r} not handled")
    argv = []
    for word in shlex.split(value):
        # ${VAR} stays one word; a bare $VAR word splits on whitespace.
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            argv.extend(env.get(m.group(1), "").split())
            continue
        argv.append(
            re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word)
        )
    return argv, ignore_failure


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in ("start", "stop", "show"):
        sys.exit(__doc__)
    root, unit, instance, what = sys.argv[1:]
    entries = [(k, specifiers(v, instance)) for k, v in service_section(unit)]
    env = {"PATH": SYSTEMD_PATH}
    for key, value in entries:
        if key == "EnvironmentFile":
            optional = value.startswith("-")
            path = value.lstrip("-")
            try:
                read_env_file(root, path, env)
            except FileNotFoundError:
                if not optional:
                    sys.exit(f"unit_exec: EnvironmentFile {path} missing")
    key = {"start": "ExecStart", "stop": "ExecStop"}.get(what)
    lines = [command(v, env) for k, v in entries if k == (key or "ExecStart")]
    if what == "show":
        for k in sorted(env):
            print(f"env {k}={env[k]}")
        for k, v in entries:
            if k.startswith("Exec"):
                print(f"{k} {shlex.join(command(v, env)[0])}")
        return 0
    for argv, ignore_failure in lines:
        print(f"unit_exec: {key}: {shlex.join(argv)}", flush=True)
        envv = [f"{k}={v}" for k, v in sorted(env.items())]
        rc = subprocess.call(["chroot", root, "env", "-i", *envv, *argv])
        if rc != 0 and not ignore_failure:
            print(f"unit_exec: {key} exited {rc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
