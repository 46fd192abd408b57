"""Host check of the system clock's synchronisation to NTP/PTP (clock.sync), from chronyc or timedatectl. No
torch."""

import re

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext

CLOCK = CheckInfo("clock.sync", "system clock synchronised to NTP/PTP (timestamps and timeouts agree across nodes)")

CLOCK_WARN_S, CLOCK_FAIL_S = 0.1, 1.0

_CHRONY_OFFSET = re.compile(r"^System time\s*:\s*([0-9.eE+-]+) seconds (fast|slow) of NTP time", re.M)
_CHRONY_LEAP = re.compile(r"^Leap status\s*:\s*(.+)$", re.M)
_CLOCK_FIX = "start an NTP/PTP daemon (systemctl enable --now chronyd) and check its sources: chronyc sources -v"


def parse_chronyc_tracking(text: str) -> tuple[float | None, str | None]:
    """(offset in seconds, positive = fast; leap status) from `chronyc tracking` output."""
    offset = _CHRONY_OFFSET.search(text)
    leap = _CHRONY_LEAP.search(text)
    seconds = None
    if offset:
        seconds = float(offset.group(1)) * (1 if offset.group(2) == "fast" else -1)
    return seconds, leap.group(1).strip() if leap else None


def check_clock_sync(ctx: HostContext) -> Check:
    chrony = ctx.tool_output(["chronyc", "tracking"], "chronyc_tracking.txt")
    if chrony.ok:
        offset, leap = parse_chronyc_tracking(chrony.text)
        if offset is None and leap is None:
            return CLOCK.result("skip", f"no 'System time' or 'Leap status' line in {chrony.source}",
                                measured=chrony.source)
        evidence = (f"offset {offset * 1000:+.3f} ms" if offset is not None else "offset unknown") + \
                   f", leap status {leap or 'unknown'} (chrony)"
        details = {"offset_s": offset, "leap_status": leap}
        if leap is not None and leap.lower() != "normal" and "insert" not in leap.lower() \
                and "delete" not in leap.lower():
            return CLOCK.result("fail", evidence, fix=_CLOCK_FIX, measured=chrony.source, **details)
        if offset is not None and abs(offset) > CLOCK_FAIL_S:
            return CLOCK.result("fail", f"{evidence}: > {CLOCK_FAIL_S:g} s", fix=_CLOCK_FIX + "; step it once: "
                                "chronyc makestep", measured=chrony.source, **details)
        if offset is not None and abs(offset) > CLOCK_WARN_S:
            return CLOCK.result("warn", f"{evidence}: > {CLOCK_WARN_S * 1000:g} ms", fix=_CLOCK_FIX,
                                measured=chrony.source, **details)
        return CLOCK.result("pass", evidence, measured=chrony.source, **details)
    timedatectl = ctx.tool_output(["timedatectl", "show", "-p", "NTPSynchronized"], "timedatectl_ntp.txt")
    if timedatectl.ok:
        value = timedatectl.text.partition("=")[2].strip().lower()
        if value in ("yes", "no"):
            status = "pass" if value == "yes" else "fail"
            return CLOCK.result(status, f"NTPSynchronized={value} (timedatectl; offset not reported)",
                                fix="" if status == "pass" else _CLOCK_FIX, measured=timedatectl.source,
                                ntp_synchronized=value == "yes")
    return CLOCK.result("skip", f"clock state unknown: {chrony.text}; {timedatectl.text}",
                        measured=f"{chrony.source}; {timedatectl.source}")
