"""The command guard: what a shell command may do before anyone is asked, and what it may not.

Every command a tool would run passes through `check_command`, and the order of its checks
is the security design. Three verdicts come first and no setting can lower them: the
hardline floor (commands whose damage cannot be undone), the `sudo -S` guard (a model
piping guessed passwords into sudo is iterating against an oracle, not doing work), and
the operator's deny globs. Only then, and only where the command reaches real files, do
the dangerous patterns that need a human apply. Whether approvals are switched off is not
this module's business: the gate consults the bypass after these verdicts, so trusting the
agent never means trusting it to wipe the disk.

Matching runs on a normalised copy of the command (`normalise`). Matching the raw text
would let `r''m -rf /`, `rm${IFS}-rf${IFS}/`, a fullwidth `ｒｍ` or a line continuation
walk past every pattern. Normalising over-approximates (a `;` inside quotes is treated
as a separator): a false "ask" costs a click, a false "allow" costs the disk.

Patterns alone lose to the next spelling (`rm -r -f src`, `git -c a=b push --force`,
`python3 -c` with `shutil.rmtree`), so on the full ladder the command is also read by its
structure and judged by what it does (`app/security/shell/`).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
import socket
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from app.security.shell.effects import assess
from app.security.shell.syntax import CONFUSABLES

Action = Literal["allow", "approve", "block"]


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    rule: str = ""
    """A stable name for what matched (`floor.recursive_delete`, `danger.git_force`, ...)."""
    reason: str = ""
    """One sentence a human (and the model) can read."""
    normalised: str = ""


ALLOW = Verdict("allow")

# ---------------------------------------------------------------- normalisation

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC ... BEL or ST
    r"|\x1b[@-Z\\-_]"  # two-byte escapes
    r"|[\x9b][0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTINUATION = re.compile(r"\\\r?\n")
_IFS = re.compile(r"\$\{IFS(?:[^}]*)\}|\$IFS(?![A-Za-z0-9_])")
_ANSI_C_QUOTE = re.compile(r"\$'((?:[^'\\]|\\.)*)'")
_EMPTY_SUBST = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:0:0\}|\$\(\s*\)|``")


def _decode_ansi_c(match: re.Match[str]) -> str:
    body = match.group(1)
    try:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return body


def _undo_quotes(text: str) -> str:
    """Drop quote characters and backslash escapes, keeping what they quoted.

    `r''m`, `"r"m` and `r\\m` all run `rm`; after this they read as `rm` too.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if ch not in "'\"":
            out.append(ch)
        i += 1
    return "".join(out)


def _fold_case(text: str) -> str:
    """Lower-case everything except flags: `sudo -S` (password on stdin) and `sudo -s`
    (a shell) are different commands, as are `rm -R` and a file called `-r`... but `RM`,
    `/BIN/Rm` and `Drop Table` are the same as their lower-case spellings to a reader."""
    return re.sub(r"(?<![^\s;&|(){}`=])(-[^\s;&|()]*)|([^\s;&|()]+)", _fold_token, text)


def _fold_token(match: re.Match[str]) -> str:
    flag, word = match.group(1), match.group(2)
    return flag if flag is not None else word.lower()


def normalise(command: str) -> str:
    """The command as the guard reads it; see the module docstring for why."""
    text = _ANSI.sub("", command).replace("\x00", "")
    text = unicodedata.normalize("NFKC", text)
    # Zero-width and other format characters (U+200B inside `rm`) render as nothing.
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    text = text.translate(CONFUSABLES)
    text = _CONTINUATION.sub("", text)
    text = _ANSI_C_QUOTE.sub(_decode_ansi_c, text)
    text = _EMPTY_SUBST.sub("", text)
    text = _IFS.sub(" ", text)
    text = _undo_quotes(text)
    text = _IFS.sub(" ", text)  # `"$IFS"` only became bare once its quotes were gone
    text = text.replace("\t", " ")
    text = _fold_case(text)
    return re.sub(r"[ ]{2,}", " ", text).strip()


def has_compound_operators(command: str) -> bool:
    """Whether the command has a shell operator outside single quotes: `; & | > <`, a
    newline, `$(` or a backtick (the last two expand inside double quotes as well).

    Such a command never matches an allowlist shortcut: `git status*` would otherwise
    allow `git status; rm -rf ~/src`.
    """
    text = _CONTINUATION.sub("", unicodedata.normalize("NFKC", command.replace("\x00", "")))
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote == "'":
            if ch == "'":
                quote = None
        elif ch == "`" or (ch == "$" and text[i + 1 : i + 2] == "("):
            return True
        elif quote == '"':
            if ch == '"':
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in ";&|<>\n\r":
            return True
        i += 1
    return False


# ---------------------------------------------------------------- segments

_SEPARATORS = re.compile(r"\|\||&&|[;&|\n(){}`]|\$\(")
_WRAPPERS = frozenset(
    {
        "sudo",
        "doas",
        "env",
        "command",
        "builtin",
        "exec",
        "nohup",
        "nice",
        "ionice",
        "time",
        "timeout",
        "xargs",
        "busybox",
        "stdbuf",
        "chroot",
        "setsid",
        "eval",
        "coproc",
        # Compound-command keywords: the command after one runs like any other, so
        # `if rm -rf /; then :; fi` is the floor's `rm -rf /`.
        "if",
        "elif",
        "while",
        "until",
        "then",
        "do",
        "else",
        "!",
    }
)
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "fish"})
_ASSIGNMENT = re.compile(r"^[a-z_][a-z0-9_]*=")


@dataclass(frozen=True, slots=True)
class Segment:
    """One simple command: its program name (basename, lower case) and arguments."""

    program: str
    args: tuple[str, ...]
    wrappers: tuple[str, ...] = ()
    wrapper_flags: tuple[str, ...] = ()
    """Options given to the wrappers (`sudo -S`, `nice -n`), kept apart from the program's."""

    def flags(self) -> list[str]:
        return [a for a in self.args if a.startswith("-") and a != "-"]

    def operands(self) -> list[str]:
        return [a for a in self.args if not a.startswith("-") or a == "-"]

    def has_short_flag(self, letters: str) -> bool:
        return any(
            not f.startswith("--") and any(c in f[1:] for c in letters) for f in self.flags()
        )

    def has_long_flag(self, *names: str) -> bool:
        return any(f.split("=", 1)[0] in names for f in self.flags())


_WRAPPER_VALUE_FLAGS = frozenset({"-u", "-g", "-n", "-c", "-p", "-C", "-h", "-r", "-t"})


def _drop_redirections(words: list[str]) -> list[str]:
    """`rm -rf build > /dev/null` deletes `build`, not `/dev/null`: a redirection's target
    is not an operand (raw device writes are caught on the text, not here)."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in (">", ">>", "<", "<<", "<<<"):
            skip = True
            continue
        kept.append(word)
    return kept


def segments(normalised: str) -> list[Segment]:
    """Split on every separator and unwrap `sudo`, `env X=1`, `bash -c`, `/bin/` prefixes."""
    found: list[Segment] = []
    for part in _SEPARATORS.split(normalised):
        spaced = re.sub(r"(\d*)(>>|>|<<<|<<|<)", r" \2 ", part)
        words = _drop_redirections(spaced.split())
        wrappers: list[str] = []
        wrapper_flags: list[str] = []
        while words:
            head = words[0].rsplit("/", 1)[-1]
            if _ASSIGNMENT.match(words[0]):
                words = words[1:]
            elif head in _WRAPPERS:
                wrappers.append(head)
                words = words[1:]
                # A wrapper's own options (`sudo -u root`, `nice -n 5`, `timeout 10`).
                while words and (words[0].startswith("-") or words[0].replace(".", "").isdigit()):
                    flag = words.pop(0)
                    wrapper_flags.append(flag)
                    if flag in _WRAPPER_VALUE_FLAGS and head != "env" and words:
                        words.pop(0)
            elif head in _SHELLS and len(words) > 1 and words[1] in ("-c", "-lc", "-ec", "-ic"):
                wrappers.append(head)
                words = words[2:]
            else:
                break
        if words:
            program = words[0].rsplit("/", 1)[-1]
            found.append(Segment(program, tuple(words[1:]), tuple(wrappers), tuple(wrapper_flags)))
        elif wrappers:
            found.append(Segment(wrappers[-1], (), tuple(wrappers), tuple(wrapper_flags)))
    return found


# ---------------------------------------------------------------- the floor

_SYSTEM_DIRS = frozenset(
    {
        "bin",
        "boot",
        "dev",
        "etc",
        "home",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "media",
        "mnt",
        "opt",
        "proc",
        "root",
        "run",
        "sbin",
        "srv",
        "sys",
        "usr",
        "var",
        "snap",
        "system",
        "library",
        "applications",
        "users",
    }
)
_HOME_TARGETS = re.compile(r"^(~[a-z0-9_.-]*|\$home|\$\{home\}|/home/[^/]+|/users/[^/]+|/root)$")
_BLOCK_DEVICE = re.compile(
    r"^/dev/(sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|md\d|dm-\d|disk\d|loop\d|"
    r"mapper/|sr\d|nbd\d|rbd\d|zd\d)"
)
# The name starts where a name can start: retried at every letter of a long run, the
# search was quadratic (60 s for a 100 KB command, on the event loop).
_FORK_BOMB = re.compile(r"(?<![a-z0-9_:])([a-z_:][a-z0-9_:]*)\(\)\{[^}]*\1\|\1&")
_PERL_FORK = re.compile(r"fork\s*while\s*fork|while\s*\(?\s*(?:1|true)\s*\)?\s*;?\s*do\s*\S*\s*&")


def _strip_target(target: str) -> str:
    """`/etc/`, `/etc/.`, `/etc/*` and `//etc` name the same tree as `/etc`."""
    t = re.sub(r"/{2,}", "/", target)
    while len(t) > 1 and (t.endswith("/") or t.endswith("/.") or t.endswith("/*")):
        t = t[:-2] if t.endswith(("/.", "/*")) else t[:-1]
    return t or "/"


def _is_floor_target(target: str) -> bool:
    t = _strip_target(target)
    if t in ("/", "/*", "/.", "/.*"):
        return True
    if _HOME_TARGETS.match(t) or re.match(r"^(~|\$home|\$\{home\})/?\*?$", t):
        return True
    parts = t.strip("/").split("/")
    return t.startswith("/") and len(parts) == 1 and parts[0].rstrip("*") in _SYSTEM_DIRS


def _recursive_rm(seg: Segment) -> bool:
    return seg.program == "rm" and (seg.has_short_flag("rR") or seg.has_long_flag("--recursive"))


def _floor(text: str, segs: Sequence[Segment]) -> Verdict | None:
    compact = re.sub(r"\s+", "", text)
    if _FORK_BOMB.search(compact) or _PERL_FORK.search(text):
        return Verdict("block", "floor.fork_bomb", "a fork bomb would exhaust the machine")
    if re.search(r">\s*/dev/(sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|md\d|dm-\d)", text):
        return Verdict("block", "floor.raw_device_write", "a raw write to a block device")
    for seg in segs:
        p, args = seg.program, seg.args
        if _recursive_rm(seg) and (
            seg.has_long_flag("--no-preserve-root")
            or any(_is_floor_target(a) for a in seg.operands())
        ):
            return Verdict(
                "block",
                "floor.recursive_delete",
                "a recursive delete of /, a system directory or a home directory",
            )
        if p.startswith(("mkfs", "mke2fs", "mkswap", "mkntfs", "mkdosfs")) or p in (
            "wipefs",
            "blkdiscard",
        ):
            return Verdict("block", "floor.filesystem", "creating or wiping a filesystem")
        if p in ("dd", "shred", "pv") and any(
            _BLOCK_DEVICE.match(a.split("=", 1)[-1]) for a in args if a.startswith(("of=", "/"))
        ):
            return Verdict("block", "floor.raw_device_write", "a raw write to a block device")
        if p in ("shutdown", "reboot", "halt", "poweroff", "kexec") or (
            p in ("systemctl", "loginctl")
            and any(a in ("poweroff", "reboot", "halt", "kexec", "suspend") for a in args)
        ):
            return Verdict("block", "floor.shutdown", "shutting down or rebooting the machine")
        if p in ("init", "telinit") and any(a in ("0", "6") for a in args):
            return Verdict("block", "floor.shutdown", "shutting down or rebooting the machine")
        if p in ("kill", "pkill") and _kills_everything(args):
            return Verdict("block", "floor.kill_all", "signalling every process (kill -1)")
        if p == "killall5":
            return Verdict("block", "floor.kill_all", "signalling every process (killall5)")
        if (
            p == "chmod"
            and seg.has_short_flag("R")
            and any(_is_floor_target(a) for a in seg.operands()[1:])
        ):
            return Verdict("block", "floor.chmod_root", "a recursive chmod of a system tree")
    return None


def _kills_everything(args: Sequence[str]) -> bool:
    if "-1" not in args:
        return False
    # `kill -1 PID` sends SIGHUP to PID; pid -1 is "every process I may signal".
    return args.index("-1") > 0 or len(args) == 1


def _sudo_stdin(segs: Sequence[Segment]) -> Verdict | None:
    for seg in segs:
        if "sudo" not in seg.wrappers and seg.program != "sudo":
            continue
        flags = seg.wrapper_flags + (seg.args if seg.program == "sudo" else ())
        if any(
            f == "--stdin" or (f.startswith("-") and not f.startswith("--") and "S" in f)
            for f in flags
        ):
            return Verdict(
                "block",
                "floor.sudo_stdin",
                "piping a password into sudo -S is guessing against a password oracle",
            )
    return None


# ---------------------------------------------------------------- dangerous patterns

_PIPE_TO_SHELL = re.compile(
    r"\b(?:curl|wget|fetch|aria2c|lynx)\b.*\|\s*(?:sudo\s+)?(?:env\s+)?"
    r"(?:/\S*/)?(?:ba|z|da|k|a)?sh\b|\b(?:curl|wget)\b.*\|\s*(?:sudo\s+)?"
    r"(?:python[0-9.]*|perl|ruby|node|php)\b"
)
_SHELL_OF_DOWNLOAD = re.compile(
    r"(?:(?:ba|z|da|k)?sh|source|\.)\s+(?:-c\s+)?(?:<\(|\$\()\s*(?:curl|wget)\b"
)
_DECODE_EXEC = re.compile(
    r"(?:base64\s+(?:-[a-zA-Z]*d|--decode|-D)|xxd\s+(?:-[a-z]+\s+)*-r|openssl\s+(?:enc|base64)"
    r"\b[^|]*-d|uudecode|gunzip|zcat|bzcat|xzcat|\brev\b|\btr\s)[^|]*\|\s*(?:sudo\s+)?"
    r"(?:/\S*/)?(?:(?:ba|z|da|k|a)?sh|python[0-9.]*|perl|ruby|node|php|eval)\b"
    r"|\beval\b.*\b(?:base64|xxd|b64decode)\b"
    r"|\b(?:exec|eval)\s*\(.*\b(?:b64decode|decode|fromhex|unhexlify)\b"
    r"|(?:ba|z|da)?sh\s+<\(\s*(?:echo|printf)\b.*\|\s*(?:base64|xxd)"
)
_SQL = re.compile(
    r"\bdrop\s+(?:table|database|schema|index|view|user|role)\b"
    r"|\btruncate\s+(?:table\s+)?[a-z_\"`\[]"
    r"|\bdelete\s+from\s+[\w.\"`\[\]]+(?![^;]*\bwhere\b)"
)
_RC_FILES = re.compile(
    r"(?:^|[\s/=<>])(?:\.bashrc|\.bash_profile|\.bash_login|\.bash_logout|\.profile|\.zshrc|"
    r"\.zshenv|\.zprofile|\.zlogin|\.kshrc|\.cshrc|\.tcshrc|\.inputrc|config\.fish|"
    r"/etc/profile|/etc/bash\.bashrc|/etc/environment|/etc/zsh/zshrc|\.xprofile|\.xinitrc)"
    r"(?:$|[\s;&|)])"
)
_RC_REDIRECT = re.compile(
    r"(?:>>?|\btee\b(?:\s+-\S+)*)\s*\S*(?:\.bashrc|\.bash_profile|\.bash_login|\.profile|"
    r"\.zshrc|\.zshenv|\.zprofile|\.zlogin|\.kshrc|\.cshrc|config\.fish|/etc/profile|"
    r"/etc/bash\.bashrc|/etc/environment)\b"
)
_FILE_WRITERS = frozenset({"cp", "mv", "ln", "install", "tee", "dd", "rsync", "truncate", "sed"})
_CREDENTIALS = re.compile(
    r"\.aws/|\baws_secret_access_key\b|\baws_session_token\b|\.config/gcloud|\.azure/|"
    r"\.kube/config|\.docker/config\.json|\.netrc\b|\.git-credentials|\.npmrc|\.pypirc|"
    r"application_default_credentials|\bgcloud\s+auth\s+(?:print-access-token|"
    r"application-default)|\baz\s+account\s+get-access-token|\baws\s+(?:configure|sts\s+"
    r"get-session-token)|\.ssh/|\bid_(?:rsa|ed25519|ecdsa|dsa)\b|/etc/shadow\b"
)
_SSH_PROGRAMS = frozenset({"ssh", "scp", "sftp", "ssh-copy-id", "sshpass", "autossh", "mosh"})
_METADATA_HOSTS = re.compile(
    r"metadata\.google\.internal|metadata\.goog\b|metadata\.azure\.com|instance-data\b|"
    r"fd00:ec2::254|\[?::ffff:169\.254\.|\[?::ffff:a9fe:"
)
_IP_CANDIDATE = re.compile(r"(?<![\w.])(?:0x[0-9a-f]+|[0-9]+)(?:\.(?:0x[0-9a-f]+|[0-9]+)){0,3}")
_METADATA_NETS = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("100.100.100.200/32"),
)


def _metadata_address(text: str) -> bool:
    if _METADATA_HOSTS.search(text):
        return True
    for match in _IP_CANDIDATE.finditer(text):
        token = match.group(0)
        if token.isdigit() and int(token) < 2**24:
            continue  # plain small numbers (`sleep 10`, `head -n 5`) are not addresses
        try:
            # inet_aton reads every legacy spelling: 2852039166, 0xa9fea9fe, 0251.0376...
            packed = socket.inet_aton(token)
        except OSError:
            continue
        address = ipaddress.ip_address(packed)
        if any(address in net for net in _METADATA_NETS):
            return True
    return False


def _broad(target: str) -> bool:
    """A target whose extent the command line does not pin down: an absolute path, a
    glob, the current or parent directory, a home or variable expansion."""
    t = target.rstrip("/") or "/"
    return (
        t.startswith(("/", "~", "$", ".."))
        or t in (".", "./", "./*", "-")
        or any(c in t for c in "*?[")
    )


_COMPUTED_COMMAND = re.compile(r"(?:^|[;&|\n(]|&&|\|\|)\s*(?:\$\(|`)")


def _dangerous(text: str, segs: Sequence[Segment]) -> Verdict | None:
    if _COMPUTED_COMMAND.search(text) or any(s.program.startswith("$") for s in segs):
        # `$(echo rm) -rf ~` or `$CMD -rf ~`: no pattern can read a name computed at run
        # time, so a human does.
        return Verdict(
            "approve", "danger.computed_command", "a command whose name is computed at run time"
        )
    for seg in segs:
        p = seg.program
        if p in ("chmod", "chown", "chgrp") and (
            (
                (seg.has_short_flag("R") or seg.has_long_flag("--recursive"))
                and any(_broad(a) for a in seg.operands()[1:])
            )
            or any(a.startswith("/") for a in seg.operands()[1:])
        ):
            return Verdict("approve", "danger.permissions", "changing ownership or modes broadly")
        if p in _SSH_PROGRAMS:
            return Verdict("approve", "danger.ssh", "opening a connection to another machine")
        in_place = p != "sed" or seg.has_short_flag("i") or seg.has_long_flag("--in-place")
        if p in _FILE_WRITERS and in_place and _RC_FILES.search(" ".join(seg.args)):
            return Verdict("approve", "danger.shell_rc", "a write into a shell startup file")
    if _PIPE_TO_SHELL.search(text) or _SHELL_OF_DOWNLOAD.search(text):
        return Verdict("approve", "danger.pipe_to_shell", "running a downloaded script unseen")
    if _DECODE_EXEC.search(text):
        return Verdict("approve", "danger.decode_exec", "decoding text and executing it")
    if _SQL.search(text):
        return Verdict("approve", "danger.sql_destructive", "a destructive SQL statement")
    if _RC_REDIRECT.search(text):
        return Verdict("approve", "danger.shell_rc", "a write into a shell startup file")
    if _CREDENTIALS.search(text):
        return Verdict("approve", "danger.credentials", "touching cloud or SSH credentials")
    if _metadata_address(text):
        return Verdict("approve", "danger.metadata", "reaching a cloud metadata address")
    return None


# ---------------------------------------------------------------- the ladder


def matches_glob(normalised: str, segs: Sequence[Segment], globs: Iterable[str]) -> str | None:
    """The first glob (normalised the same way) matching the whole command or any segment."""
    pieces = [normalised, *(" ".join((s.program, *s.args)) for s in segs)]
    for glob in globs:
        pattern = normalise(glob)
        if pattern and any(fnmatch.fnmatchcase(piece, pattern) for piece in pieces):
            return glob
    return None


def check_command(
    command: str, *, deny_globs: Sequence[str] = (), full_ladder: bool = True
) -> Verdict:
    """The guard's verdict, before any bypass, allowlist or grant is consulted.

    `full_ladder` is False only inside an isolated sandbox on a per-session scratch
    workspace, where nothing outside the session can be lost: there only the floor and
    the deny globs apply.
    """
    text = normalise(command)
    segs = segments(text)
    for verdict in (_floor(text, segs), _sudo_stdin(segs)):
        if verdict is not None:
            return Verdict(verdict.action, verdict.rule, verdict.reason, text)
    if (glob := matches_glob(text, segs, deny_globs)) is not None:
        return Verdict(
            "block", "deny_glob", f"the operator denies commands matching {glob!r}", text
        )
    if not full_ladder:
        return Verdict("allow", normalised=text)
    if (danger := _dangerous(text, segs)) is not None:
        return Verdict(danger.action, danger.rule, danger.reason, text)
    # What the command does, read by its structure: a recursive delete in any spelling,
    # code run from text the command itself produced, and the rest (app/security/shell/).
    findings = assess(command).findings
    if findings:
        return Verdict("approve", findings[0].rule, findings[0].reason, text)
    return Verdict("allow", normalised=text)


def allowlisted(command: str, globs: Sequence[str]) -> str | None:
    """The allowlist glob that lets `command` skip approval; never one for a command with
    unquoted compound operators, whose pieces the glob was not written to vouch for."""
    if not globs or has_compound_operators(command):
        return None
    text = normalise(command)
    for glob in globs:
        if fnmatch.fnmatchcase(text, normalise(glob)):
            return glob
    return None
