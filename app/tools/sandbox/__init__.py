"""The terminal tool's sandbox: one shell command under bubblewrap (`bwrap`), or, when a
profile asks, on the host; and the cgroups that bound it.

The sandbox is what keeps an exposed endpoint from being remote code execution on the host.
Each call gets:

- the workspace bound read-write at /workspace (also the cwd and HOME); nothing else the
  command can write survives the call;
- /usr and the /bin, /lib* links read-only, and an *allowlisted* handful of /etc files. A
  whole-/etc bind with /etc/shadow masked would still hand out whatever else the host keeps
  there: this very machine has /etc/pip.conf and /etc/npmrc, where registry tokens live.
  passwd, group and hosts are synthesised, so host account names do not leak either;
- a fresh /tmp (size-capped tmpfs), a fresh /proc for a new PID namespace, a minimal /dev;
- every namespace unshared (no network unless the profile allows it), no capabilities, no
  nested user namespaces, a new session (no TIOCSTI into a terminal), death with its
  parent, and a seccomp filter that refuses setuid/setgid modes (`seccomp.py`);
- a scrubbed environment (PATH, HOME, LANG, TERM=dumb, ...): never COURIER_* or provider keys;
- a process limit, a timeout that kills everything the command started, and capped output.

Running as root (CI does) needs two extra measures, because bwrap maps the sandbox user to
the caller's uid and the kernel then treats sandboxed processes as host root for permission
checks (though they hold no capabilities):

- /proc/sys and friends are re-bound read-only. bwrap skips covering /proc/sys when the
  directory itself looks read-only, but the files in it are writable by uid 0: a sandboxed
  `echo '|/workspace/x' > /proc/sys/kernel/core_pattern` would run code as host root.
- RLIMIT_NPROC never applies to uid 0, so the process limit is a pids cgroup when one can be
  created (root usually can). For other callers RLIMIT_NPROC works and is applied too.

In rooms: `policy.py` (what a profile allows: the files, the user, the environment),
`seccomp.py` (the syscall filter), `argv.py` (the bwrap command line), `process.py`
(running it: the probe, the limits, capture, kill and reap), and beside them the cgroups
(`cgroups.py`, `pids_cgroup.py`, `memory_cgroup.py`).
"""
