"""The text report's timeline: the last steps, and the early steps that tell what went wrong."""

from kaudit.report.console import KEY_STEPS, TIMELINE_LINES, timeline_steps


def test_short_timelines_are_shown_whole():
    lines = [f"step {i}" for i in range(TIMELINE_LINES)]
    assert timeline_steps(lines) == lines


def test_the_last_steps_with_the_gap_counted():
    lines = [f"step {i}" for i in range(20)]
    assert timeline_steps(lines) == [f"… {20 - TIMELINE_LINES} step(s)"] + lines[-TIMELINE_LINES:]


def test_early_refusals_and_admin_markers_are_kept_in_order():
    lines = [f"step {i}" for i in range(20)]
    lines[2] = "frame 9: Produce t-0 epoch 0 -> error 47 (a zombie: its epoch was fenced)"
    lines[5] = "frame 12: WriteTxnMarkers ABORT to t-0 from 'admin' (not the coordinator: an admin)"
    got = timeline_steps(lines)
    assert got == ["… 2 step(s)", lines[2], "… 2 step(s)", lines[5], f"… {20 - TIMELINE_LINES - 6} step(s)"] \
        + lines[-TIMELINE_LINES:]


def test_at_most_key_steps_early_ones():
    lines = [f"frame {i}: -> error 10" for i in range(30)]
    got = timeline_steps(lines)
    assert got == lines[:KEY_STEPS] + [f"… {30 - TIMELINE_LINES - KEY_STEPS} step(s)"] + lines[-TIMELINE_LINES:]
