"""What a diagnosis cost the box in server start-ups (issue 28: loads are the cost it minimises):
the run's launches with the restore's relaunch (:func:`all_launches`), how many start-ups that was
(:func:`count_loads`), the box's timeline — what served the port when (:func:`timeline`) — and the
seconds it served nothing (:func:`downtime_s`).

Pure functions of launch records (:func:`workbench.session.launches.launch_record`: epoch seconds
``stopped_at``, ``launched_at``, ``ready_at``); nothing here talks to the box.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["STATES", "all_launches", "count_loads", "serving_state", "timeline", "downtime_s"]

#: The states of the box's port on the timeline, in the report's words: served by the server as
#: found (also when the run launched the command as given), nothing serving because a stop began
#: and the next server is not ready yet (``down``: what :func:`downtime_s` sums), the probe
#: launch's server, the fixed server (the probes riding on it or not), a candidate's or a ladder
#: rung's server, the original relaunched by the restore, and no server at all (a box that had
#: none, before the run launched one and after it stopped it).
STATES = ("serving as found", "down", "serving with probes", "serving fixed", "serving a trial", "restored",
          "no server")


def all_launches(launches: Iterable[dict], restore_launch: dict | None) -> list[dict]:
    """The run's launch records in order, then the restore's relaunch of the original server
    (label ``restore``) when there was one."""
    out = [dict(r) for r in launches]
    if restore_launch:
        out.append(dict(restore_launch))
    return out


def count_loads(launches: Iterable[dict]) -> int:
    """Server start-ups the run caused: every launch that started a process (``pid`` set),
    whether or not it became ready; a launch the guard refused, or one that found its port taken,
    started nothing and is no load."""
    return sum(1 for r in launches if r.get("pid") is not None)


def serving_state(label: str) -> str:
    """The :data:`STATES` entry of a server launched with ``label``."""
    if label == "as-found":
        return "serving as found"
    if label == "probe":
        return "serving with probes"
    if label == "fix":
        return "serving fixed"
    if label == "restore":
        return "restored"
    return "serving a trial"  # "candidate: ...", "ladder: k fix(es)"


def timeline(launches: Iterable[dict], *, found_serving: bool, start: float, end: float,
             final_stop_at: float | None = None) -> list[dict[str, Any]]:
    """The box's port from ``start`` to ``end`` (epoch seconds) as segments ``{"state", "from",
    "to", "seconds", "label"}`` in order: ``state`` one of :data:`STATES`, ``label`` the launch
    whose server served (``None`` for the server as found, a gap or ``down``). ``found_serving``:
    a server answered on the port when the run began. Each launch record's ``stopped_at`` ends
    what served and begins ``down``; its ``ready_at`` begins its server's state. A launch that
    never got ready leaves the box down until the next ready one. ``final_stop_at``: the restore
    stopped the run's server and relaunched nothing (the box had no server as found): the port is
    then free again (``no server``), not down. Segments of zero length are left out."""
    segments: list[dict[str, Any]] = []
    state, label, t = ("serving as found" if found_serving else "no server"), None, start

    def close(at: float | None, new_state: str, new_label: str | None) -> None:
        nonlocal state, label, t
        if at is None:
            return
        at = max(at, t)
        if at > t:
            segments.append({"state": state, "from": t, "to": at, "seconds": round(at - t, 2), "label": label})
        state, label, t = new_state, new_label, at

    for rec in sorted(launches, key=lambda r: r.get("stopped_at") or r.get("launched_at") or 0.0):
        if rec.get("stopped_at") is not None and state != "down":
            close(rec["stopped_at"], "down", None)
        if rec.get("ready_at") is not None:
            close(rec["ready_at"], serving_state(rec.get("label") or ""), rec.get("label"))
    if final_stop_at is not None and state != "down":
        close(final_stop_at, "no server", None)
    close(max(end, t), state, label)
    return segments


def downtime_s(segments: Iterable[dict]) -> float:
    """Seconds the box served nothing although it served when the run began or when the run
    stopped something: the ``down`` segments of :func:`timeline`, summed (a stop of whatever served
    the port until the next server on it was ready). A run that leaves the fixed server
    (``keep_fix``) counts until it was ready; one whose last server never got ready counts until
    the verdict was written."""
    return round(sum(s["seconds"] for s in segments if s["state"] == "down"), 2)
