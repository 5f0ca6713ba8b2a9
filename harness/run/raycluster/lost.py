"""A scenario whose Ray work did not come back: its node lost, its worker killed, or the
harness's own task failing on the node.

A node or worker lost under a running scenario ends it `crash`, naming the node and the
ranks that ran there (their logs were on that node and are gone with it); a fault of
the harness's task itself (a bug, a full disk on the node) is `error`, never blamed on
the engine. Every other scenario of the run goes on.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from harness.contract.verdict import Verdict
from harness.engines.launch import RankFailure
from harness.run.raycluster import placement
from harness.run.runner import RunContext, record_verdict


def lost_verdict(ray, flight, exc: BaseException, run_dir: Path, opts: RunContext) -> Verdict:
    scenario = flight.scenario
    if isinstance(exc, ray.exceptions.RayTaskError) and not isinstance(exc, ray.exceptions.TaskCancelledError):
        verdict = Verdict(
            scenario.id, "error", f"harness error on the Ray node: {_first_line(exc)}", error={"exception": str(exc)}
        )
    else:
        verdict = _crash(ray, scenario.id, flight, exc)
    return record_verdict(scenario, verdict, run_dir, opts, flight.submitted)


def _crash(ray, name: str, flight, exc: BaseException) -> Verdict:
    nodes = flight.nodes or ["?"] * flight.need
    dead = {n for n in set(nodes) if not _alive(ray, n)}
    lost = dead or set(nodes)
    ranks = [r for r, n in enumerate(nodes) if n in lost] or list(range(flight.need))
    node = sorted(lost)[0]
    where = f"node {node[:12]} ({flight.addresses.get(node, '?')})"
    what = "was lost (its raylet died)" if dead else "lost the Ray worker running the scenario"
    exception = f"NodeLost: {where} {what} while rank {ranks[0]} ran there ({type(exc).__name__})"
    failure = RankFailure(
        rank=ranks[0], exitcode=None, signal=None, exception=exception, traceback=_first_line(exc), log="(on the lost node)"
    )
    reason = f"rank {ranks[0]} crashed: {exception}; ranks on that node: {', '.join(map(str, ranks))}"
    return Verdict(name, "crash", reason, crash=asdict(failure))


def _alive(ray, node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def note_nodes(ray, flight) -> None:
    """Remember which node holds each bundle once Ray placed the group (a lost node's bundles
    are placed again elsewhere, so this is read while they still stand)."""
    if flight.nodes:
        return
    nodes = placement.bundle_nodes(ray, flight.pg)
    if len(nodes) == flight.need and "?" not in nodes:
        flight.nodes = nodes
        flight.addresses = {n: placement.node_address(ray, n) for n in set(nodes)}
