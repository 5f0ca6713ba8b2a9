"""Running a parallelised stage: the KV cache, one forward step across PP stages, the
warm-up (where torch.compile captures), and the two workload kinds.

Every rank runs the same sequence of steps in lockstep. One step:
  pad the flat token batch -> (non-first stage) allocate the intermediate buffer from the
  model's declaration and receive into it -> stage forward -> (non-last stage) send the
  intermediate tensors to the peer on the next stage; (last stage) return the logits.
Sampling happens on the last stage and the chosen tokens are broadcast to every rank
from the driver rank (TP rank 0 of the last stage), so all stages feed the same tokens
to the next step.

A prefill may reuse cached leading tokens (the KV connector's store or the prefix cache)
and, under chunked prefill, run in several steps of at most the token budget.

With the KV connector on (setting kvc), each message between stages also carries the
connector's completion reports (`kv_connector_output`, see kv_connector.py), and the
driver broadcasts the merged reports back to every rank's scheduler after each step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.contract.axes import RunAxes
from harness.contract.outputs import EngineOutputs
from harness.contract.runbrief import stop_reached
from harness.engines.reference import faults as fault_switches
from harness.engines.reference import speculative
from harness.engines.reference.kv_connector import (
    WAIT_STEPS,
    ConnectorScheduler,
    KVConnector,
    prefix_key,
    prefix_len,
)
from harness.engines.reference.parallel import (
    ParallelContext,
    broadcast_from,
    broadcast_json,
    recv_json,
    recv_tensor_dict,
    send_json,
    send_tensor_dict,
)
from harness.engines.reference.prefix_cache import PrefixCache

#: the inter-stage message field that carries the KV connector's reports
SIDE_CHANNEL = "kv_connector_output"

#: prompts of a workload run in groups of at most this many sequences / prompt tokens,
#: which bounds the KV cache and the attention's key gather. The grouping depends only
#: on the workload, so every setting sees the same batches.
MAX_SEQS_PER_BATCH = 16
#: at most this many token rows of a batch are kept by a per-layer capture (evenly spaced)
CAPTURE_ROWS = 64
MAX_TOKENS_PER_BATCH = 1024
#: a `generate` workload (task evals: many long prompts, up to hundreds of new tokens)
#: decodes up to this many sequences at once; its prefill runs in chunks of whole
#: prompts within MAX_TOKENS_PER_BATCH (batch_groups of the group), and a group's KV
#: cache (sequences x (longest prompt + max_new_tokens)) stays within the token budget.
MAX_GEN_SEQS_PER_BATCH = 64
MAX_GEN_CACHE_TOKENS = 64 * 2048


def _describe(tensors: dict[str, torch.Tensor]) -> dict[str, dict]:
    return {k: {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for k, t in tensors.items()}


def _describe_shapes(shapes: dict) -> dict[str, dict]:
    return {k: {"shape": list(shape), "dtype": str(dt).removeprefix("torch.")} for k, (shape, dt) in shapes.items()}


def load_image(path: str) -> torch.Tensor:
    """A PNG written by the harness -> [3, S, S] float in [0, 1]."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as img:
        pixels = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    return torch.from_numpy(pixels).permute(2, 0, 1).contiguous()


def batch_groups(prompts: list[list[int]]) -> list[range]:
    """Consecutive prompt index ranges, each within the per-batch limits (at least one prompt)."""
    groups, start, tokens = [], 0, 0
    for i, p in enumerate(prompts):
        if i > start and (i - start >= MAX_SEQS_PER_BATCH or tokens + len(p) > MAX_TOKENS_PER_BATCH):
            groups.append(range(start, i))
            start, tokens = i, 0
        tokens += len(p)
    if prompts:
        groups.append(range(start, len(prompts)))
    return groups


def generate_groups(prompts: list[list[int]], max_new_tokens: int) -> list[range]:
    """Consecutive prompt index ranges decoded together by a `generate` workload: at
    most MAX_GEN_SEQS_PER_BATCH sequences whose KV cache (sequences x the longest
    prompt + max_new_tokens) fits MAX_GEN_CACHE_TOKENS (at least one prompt)."""
    groups, start, longest = [], 0, 0
    for i, p in enumerate(prompts):
        grown = max(longest, len(p) + max_new_tokens)
        if i > start and (i - start >= MAX_GEN_SEQS_PER_BATCH or grown * (i - start + 1) > MAX_GEN_CACHE_TOKENS):
            groups.append(range(start, i))
            start, grown = i, len(p) + max_new_tokens
        longest = grown
    if prompts:
        groups.append(range(start, len(prompts)))
    return groups


def workload_groups(w: dict) -> list[range]:
    """The prompt groups a workload's sequences are decoded in (one KV slot each)."""
    if w["kind"] == "generate":
        return generate_groups(w["prompts"], int(w["max_new_tokens"]))
    return batch_groups(w["prompts"])


def cache_shape_for(workloads: list[dict]) -> tuple[int, int]:
    """(sequence slots, max length) the KV cache needs for all workloads (and the warm-up)."""
    slots, max_len = 2, 8
    for w in workloads:
        prompts = w["prompts"]
        extra = int(w.get("max_new_tokens", 0)) if w["kind"] in ("greedy", "generate") else 0
        for g in workload_groups(w):
            slots = max(slots, len(g))
        max_len = max(max_len, max((len(p) for p in prompts), default=0) + extra)
    return slots, max_len


def _keep_guards_except_multimodal(entries) -> list[bool]:
    return [e.name.split("[")[0] not in MULTIMODAL_INPUTS for e in entries]


#: the forward's multimodal argument (guards name it `mm`, its entries `mm['deepstack']`)
MULTIMODAL_INPUTS = ("mm",)


class ModelRunner:
    """One rank's stage run over its workloads: steps, KV cache, and what each axis of the run
    (`axes`, as this rank runs them: a fault switch may have turned one off) adds to them."""

    def __init__(
        self,
        stage,
        ctx: ParallelContext,
        dtype: torch.dtype,
        workloads: list[dict],
        axes: RunAxes,
        faults: list[str],
        kv_store: str | None = None,
    ):
        self.stage, self.ctx, self.dtype = stage, ctx, dtype
        self.faults = faults
        self.forward_fn = self._compiled(stage.forward) if axes.compile else stage.forward
        self.compile = axes.compile
        slots, self.max_len = cache_shape_for(workloads)
        # padding tokens write here, never into a real sequence
        self.trash_slot = slots
        # One spare position: a step's key slice [:kv_len] then never spans the whole cache,
        # which would specialise the captured graph and recompile during the run.
        self.kv_caches = self._allocate_kv_cache(slots + 1, self.max_len + 1)
        # filled at the first real (post warm-up) step
        self.stage_io: dict | None = None
        self._record_io = False
        self._fired = False
        # per-layer stream of the steps asked for (capture=True)
        self.captured: list[dict] = []
        self.connector = KVConnector(kv_store, ctx.rank, ctx.pp_rank, stage.layer_ids) if kv_store else None
        self.scheduler = ConnectorScheduler(ctx.pp)
        self.connector_wait_steps = 0
        # tokens per prefill step (0: a prompt group in one step)
        self.chunk_budget = axes.chunked_prefill
        self.prefill_stats = {"prefills": 0, "split_prefills": 0, "chunks": 0, "largest_step_tokens": 0}
        self.prefix_cache = (PrefixCache(axes.block_size) if axes.block_size else PrefixCache()) if axes.prefix_cache else None
        # n-gram drafts verified in each decode step of a greedy workload
        self.speculate = axes.spec == "ngram"
        # asked once, not at every decode step
        self.trust_first_draft = bool(fault_switches.active(faults, "spec-accepts-unverified-draft")) or (
            ctx.dp_rank > 0 and bool(fault_switches.active(faults, "dp-replica-trusts-drafts"))
        )
        self.trust_after_hit = bool(fault_switches.active(faults, "spec-trusts-after-prefix-hit"))
        # slot -> leading tokens a prefix-cache hit restored, last prefill
        self.restored: dict[int, int] = {}
        self.spec_stats = {"steps": 0, "proposed": 0, "accepted": 0}
        # of every workload, by this rank's replica (the dp axis)
        self.prompts_served = 0
        # how the workloads were submitted (the batch axis): the largest prefill batch ran
        self.batch_stats = {"submissions": 0, "fillers": 0, "largest_batch": 0, "smallest_batch": 0}

    @staticmethod
    def _compiled(fn):
        """Capture at warm-up and reuse the graph for real requests. vLLM compiles one
        graph and runs it without guards, so a request never recompiles. Here the shape
        guards stay (they cost nothing: warm-up covers the shapes) and the guards on the
        multimodal inputs are dropped, so a text/image switch reuses the warm-up's
        capture instead of recompiling, exactly where vLLM PR 43617 bit."""
        return torch.compile(fn, dynamic=True, options={"guard_filter_fn": _keep_guards_except_multimodal})

    def _allocate_kv_cache(self, slots: int, max_len: int):
        cfg = self.stage.cfg
        caches = []
        for layer in self.stage.layers:
            shape = (slots, max_len, layer.self_attn.num_kv_heads, cfg.head_dim)
            # zeros, not empty: padding reads of never-written entries stay finite.
            caches.append(
                (
                    torch.zeros(shape, dtype=self.dtype, device=self.ctx.device),
                    torch.zeros(shape, dtype=self.dtype, device=self.ctx.device),
                )
            )
        return caches

    # --- one step --------------------------------------------------------------------

    def padded_len(self, n: int) -> int:
        """Token count after padding: a multiple of tp (SP shards evenly) and at least
        2*tp, so no SP shard has a single token (dynamic-shape compile specialises 0/1)."""
        tp = self.ctx.tp
        return max(-(-n // tp) * tp, 2 * tp)

    def step(
        self,
        ids: list[int],
        positions: list[int],
        slots: list[int],
        images: list | None = None,
        kv_ops: dict | None = None,
        capture: tuple[int, int] | None = None,
    ) -> torch.Tensor | None:
        """One forward over a flat batch. Returns the [n, vocab] logits on the last stage.
        `images`: pixel tensors of the batch's images in token order (llama-vl);
        `kv_ops`: {"load": [(slot, prompt)], "save": [(slot, prompt)]} for the connector;
        `capture`: (first row, rows in the whole batch): keep the per-layer stream of
        this step's real tokens, which are those rows of a batch (a chunk of it, under
        chunked prefill)."""
        ctx, n = self.ctx, len(ids)
        if n == 0 or max(positions) >= self.max_len:
            raise ValueError(f"bad step: {n} tokens, max position {max(positions, default=-1)}, cache {self.max_len}")
        pad = self.padded_len(n) - n
        dev = ctx.device
        ids_t = torch.tensor(ids + [0] * pad, dtype=torch.int64, device=dev)
        pos_t = torch.tensor(positions + [0] * pad, dtype=torch.int64, device=dev)
        slot_t = torch.tensor(slots + [self.trash_slot] * pad, dtype=torch.int64, device=dev)
        kv_len = max(positions) + 1
        intermediate, reports = self._receive((n + pad) // ctx.tp if ctx.sp else n + pad)
        if not self._fired:
            self._fired = True
            fault_switches.fire_rank_faults(self.faults, ctx.rank)
        for slot, prompt in (kv_ops or {}).get("load", []):
            assert self.connector is not None, "KV operations come only with a KV connector"
            self.connector.load(self.kv_caches, slot, prompt)
        mm = self._multimodal_inputs(ids_t, images)
        one_seq = len(set(slots)) == 1  # warm-up captures both attention paths
        out, layer_states = self.forward_fn(ids_t, pos_t, slot_t, self.kv_caches, kv_len, intermediate, mm, one_seq)
        for slot, prompt in (kv_ops or {}).get("save", []):
            assert self.connector is not None, "KV operations come only with a KV connector"
            self.connector.save(self.kv_caches, slot, prompt)
        if capture:
            self._capture(layer_states, n, pad, *capture)
        message = self._message(out, reports)
        if self._record_io:
            self._record_io = False
            self._record_stage_io(n, pad, intermediate, message)
        self._hand_on(message)
        return out[:n] if ctx.is_last_stage else None

    def _receive(self, local_tokens: int) -> tuple[dict | None, list]:
        """(the previous stage's intermediate tensors, its connector reports); nothing on
        the first stage. The buffer comes from the model's declaration."""
        ctx = self.ctx
        if ctx.is_first_stage:
            return None, []
        intermediate = self.stage.make_empty_intermediate_tensors(local_tokens, self.dtype, ctx.device)
        recv_tensor_dict(intermediate, src=ctx.prev_stage_peer)
        reports = (recv_json(src=ctx.prev_stage_peer).get(SIDE_CHANNEL) or []) if self.connector else []
        return intermediate, reports

    def _hand_on(self, message: dict) -> None:
        """Send the message to the next stage; with the connector, the driver then sends
        the merged reports of every stage back to every rank's scheduler."""
        ctx = self.ctx
        if not ctx.is_last_stage:
            send_tensor_dict(message["tensors"], dst=ctx.next_stage_peer)
            if self.connector:
                send_json({k: v for k, v in message.items() if k != "tensors"}, dst=ctx.next_stage_peer)
        if self.connector:
            merged = message.get(SIDE_CHANNEL, []) if ctx.is_last_stage else None
            self.scheduler.record(broadcast_json(merged, src=ctx.driver_rank))

    def _message(self, out, received_reports: list) -> dict:
        """What this stage hands on: its tensors plus, with the connector, the reports of
        every stage so far (received ones and its own)."""
        message = {"tensors": out if not self.ctx.is_last_stage else {}}
        if self.connector:
            message[SIDE_CHANNEL] = received_reports + [self.connector.take_report()]
            if fault_switches.active(self.faults, "pp-drop-kv-connector-output") and not self.ctx.is_last_stage:
                # vLLM PR 38031: rebuilt without the side channel
                message = {"tensors": message["tensors"]}
        return message

    def _multimodal_inputs(self, ids_t: torch.Tensor, images: list | None) -> dict | None:
        if self.stage.visual is None:
            return None
        return self.stage.embed_images(images or [], ids_t)

    def _capture(self, layer_states: torch.Tensor, n: int, pad: int, first_row: int, batch_rows: int) -> None:
        """Keep this rank's sampled rows of the per-layer stream (its token shard under SP).
        Every `stride`-th token row of the batch is kept, so a capture stays small and
        still covers every SP shard; the rows are numbered in the whole batch, so a
        chunked prefill keeps the rows an unchunked one keeps."""
        own = self.ctx.token_shard(n + pad) if self.ctx.sp else slice(0, n + pad)
        stride = -(-batch_rows // CAPTURE_ROWS)
        kept = [r for r in range(own.start, min(own.stop, n)) if (first_row + r) % stride == 0]
        rows = [first_row + r for r in kept]
        local = torch.tensor([r - own.start for r in kept], dtype=torch.int64, device=layer_states.device)
        self.captured.append(
            {
                "pp_rank": self.ctx.pp_rank,
                "tp_rank": self.ctx.tp_rank,
                "places": self.captured_places(),
                "rows": rows,
                "states": layer_states[:, local].float().cpu().tolist(),
            }
        )

    def captured_places(self) -> list[int]:
        """Where this stage's captured stream was taken: place 0 is the embedding's output
        (first stage only), place l+1 the stream after layer l."""
        return ([0] if self.ctx.is_first_stage else []) + [layer + 1 for layer in self.stage.layer_ids]

    def _record_stage_io(self, n: int, pad: int, intermediate, message) -> None:
        """What this stage expects (its model's declaration), allocated and received, and
        sent, for the harness's PP contract check."""
        ctx, side = self.ctx, {"kind": "object"}
        received = _describe(intermediate) if intermediate is not None else {}
        expects = None
        if intermediate is not None:
            local = next(iter(intermediate.values())).shape[0]
            expects = _describe_shapes(self.stage.intermediate_shapes(local, self.dtype))
        if expects is not None and self.connector:
            expects[SIDE_CHANNEL] = side
            received[SIDE_CHANNEL] = side
        sent = _describe(message["tensors"]) if not ctx.is_last_stage else {}
        if not ctx.is_last_stage and SIDE_CHANNEL in message:
            sent[SIDE_CHANNEL] = side
        self.stage_io = {
            "rank": ctx.rank,
            "pp_rank": ctx.pp_rank,
            "tp_rank": ctx.tp_rank,
            "layers": [self.stage.layer_ids.start, self.stage.layer_ids.stop],
            "num_tokens": n,
            "padded_tokens": n + pad,
            "expects": expects or {},
            "received": received,
            "sent": sent,
        }

    def share_tokens(self, tokens: torch.Tensor | None, count: int) -> list[int]:
        """Tokens chosen on the driver rank, broadcast to every rank."""
        buf = torch.empty(count, dtype=torch.int64, device=self.ctx.device)
        if self.ctx.rank == self.ctx.driver_rank:
            assert tokens is not None, "the driver rank, which holds the logits, chose the tokens"
            buf.copy_(tokens)
        return broadcast_from(buf, src=self.ctx.driver_rank).tolist()

    # --- the KV connector's scheduling -------------------------------------------------

    def wait_for_connector(self, ops: list[tuple[str, str]]) -> None:
        """Hold the batch until every stage reported `ops` [(op, key)]: empty steps carry
        late reports; after WAIT_STEPS of them the missing reports are a stall."""
        for _ in range(WAIT_STEPS):
            if not self.scheduler.missing(ops):
                return
            self.connector_wait_steps += 1
            self.step([0], [0], [self.trash_slot])
        if self.scheduler.missing(ops):
            # The driver's scheduler is the one of record (vLLM has one scheduler): it
            # names the stall; the other ranks' copies wait for its word, which never
            # comes, and stop when the driver's exit closes their connections.
            if self.ctx.rank == self.ctx.driver_rank:
                raise self.scheduler.stall_error(ops)
            broadcast_json(None, src=self.ctx.driver_rank)

    def load_stored_prefixes(self, prompts: list[list[int]], slots: list[int]) -> list[int]:
        """Load the stored prefix of each prompt the store holds into its slot; returns
        how many leading tokens of each prompt are now in the KV cache."""
        if not self.connector:
            return [0] * len(prompts)
        hits = [i for i, p in enumerate(prompts) if prefix_len(p) and self.scheduler.complete("saved", prefix_key(p))]
        if hits:
            self.step([0], [0], [self.trash_slot], kv_ops={"load": [(slots[i], prompts[i]) for i in hits]})
            self.wait_for_connector([("loaded", prefix_key(prompts[i])) for i in hits])
        return [prefix_len(p) if i in hits else 0 for i, p in enumerate(prompts)]

    def save_prefixes(self, prompts: list[list[int]]) -> dict:
        """kv_ops that save the whole-block prefix of each prompt after this step."""
        if not self.connector:
            return {}
        return {"save": [(slot, p) for slot, p in enumerate(prompts) if prefix_len(p)]}

    # --- prefill: cached prefixes, chunks ----------------------------------------------

    def reuse_prefixes(self, prompts: list[list[int]], slots: list[int]) -> list[int]:
        """Fill each prompt's slot with the KV of its prefix the KV connector's store or
        the prefix cache holds; returns how many leading tokens of each are there."""
        if self.prefix_cache is None:
            return self.load_stored_prefixes(prompts, slots)
        skip = not self.ctx.is_first_stage and fault_switches.active(self.faults, "prefix-cache-skips-stage")
        return [self.prefix_cache.restore(self.kv_caches, s, p, skip=bool(skip)) for s, p in zip(slots, prompts)]

    def prefill(
        self,
        prompts: list[list[int]],
        slots: list[int],
        pixels: list | None = None,
        kv_ops: dict | None = None,
        capture: bool = False,
        reuse: bool = True,
    ):
        """Prefill `prompts` into `slots`: the tokens not already cached (`reuse`: a
        teacher-forced workload needs logits at every position, so it reuses nothing),
        in one step or, under chunked prefill, in steps of at most the token budget.
        Returns (the logits of every computed row on the last stage, else None; the
        leading tokens of each prompt that came from a cache). The prefix cache then
        keeps the prompts' whole blocks."""
        sizes = self.batch_stats
        sizes["largest_batch"] = max(sizes["largest_batch"], len(prompts))
        sizes["smallest_batch"] = min(sizes["smallest_batch"] or len(prompts), len(prompts))
        cached = self.reuse_prefixes(prompts, slots) if reuse else [0] * len(prompts)
        self.restored = {s: c for s, c in zip(slots, cached) if c}
        ids = [t for p, c in zip(prompts, cached) for t in p[c:]]
        positions = [q for p, c in zip(prompts, cached) for q in range(c, len(p))]
        rows = [s for s, p, c in zip(slots, prompts, cached) for _ in range(c, len(p))]
        logits = self._prefill_steps(ids, positions, rows, pixels, kv_ops or {}, capture)
        if self.prefix_cache is not None:
            for s, p in zip(slots, prompts):
                self.prefix_cache.store(self.kv_caches, s, p)
        return logits, cached

    def _prefill_steps(self, ids, positions, slots, pixels, kv_ops: dict, capture: bool):
        """One step, or consecutive chunks of at most chunk_budget tokens (a chunk may end
        inside a prompt: the next one attends to the KV it wrote). The connector loads
        before the first chunk and saves after the last."""
        n, budget, stats = len(ids), self.chunk_budget, self.prefill_stats
        stats["prefills"] += 1
        if not budget or n <= budget:
            stats["largest_step_tokens"] = max(stats["largest_step_tokens"], n)
            return self.step(ids, positions, slots, pixels, kv_ops, (0, n) if capture else None)
        stats["split_prefills"] += 1
        pieces = []
        for start in range(0, n, budget):
            end = min(start + budget, n)
            if start and fault_switches.active(self.faults, "chunked-prefill-drops-kv"):
                self._forget_earlier_chunks(slots[start:end], positions[start:end])

            ops = {"load": kv_ops.get("load", [])} if start == 0 else {}
            if end == n:
                ops["save"] = kv_ops.get("save", [])
            logits = self.step(
                ids[start:end],
                positions[start:end],
                slots[start:end],
                pixels if start == 0 else None,
                ops,
                (start, n) if capture else None,
            )
            stats["chunks"] += 1
            stats["largest_step_tokens"] = max(stats["largest_step_tokens"], end - start)
            if logits is not None:
                pieces.append(logits)
        return torch.cat(pieces) if pieces else None

    def _forget_earlier_chunks(self, slots: list[int], positions: list[int]) -> None:
        """The chunked-prefill-drops-kv fault: each sequence of this chunk loses the KV its
        earlier positions wrote (its cache rows zeroed, as a fresh block would read)."""
        first: dict[int, int] = {}
        for slot, position in zip(slots, positions):
            first.setdefault(slot, position)
        for slot, position in first.items():
            for k_cache, v_cache in self.kv_caches:
                k_cache[slot, :position] = 0
                v_cache[slot, :position] = 0

    # --- warm-up and workloads ---------------------------------------------------------

    def warmup(self) -> None:
        """Dummy prefills (two sequences of different lengths, then one) and a decode step, run
        before any real request: torch.compile captures here, with the same argument
        structure real requests use (all tensors, never None), and the first forward's
        faults fire here."""
        lens = [3, 5]
        ids = [i % self.stage.cfg.vocab_size for i in range(sum(lens))]
        positions = [p for n in lens for p in range(n)]
        slots = [s for s, n in enumerate(lens) for _ in range(n)]
        # a batch of two sequences, then one (attention's one-sequence path), then a decode
        for n in (len(ids), lens[0]):
            if fault_switches.active(self.faults, "compile-warmup-without-images") and self.stage.visual is not None:
                self._warmup_without_deepstack(ids[:n], positions[:n], slots[:n])
            else:
                self.step(ids[:n], positions[:n], slots[:n])
        self.step([1, 2], [n for n in lens], [0, 1])
        self._record_io = True

    def _warmup_without_deepstack(self, ids, positions, slots) -> None:
        """vLLM PR 43617: the capture run passes None for the deepstack inputs. Under
        compile the captured graph has no deepstack branch, and (no guards) keeps it."""
        embed_images = self.stage.embed_images
        self.stage.embed_images = lambda images, ids_t: {**embed_images(images, ids_t), "deepstack": None}
        try:
            self.step(ids, positions, slots)
        finally:
            self.stage.embed_images = embed_images

    def run_logprobs(
        self, prompts: list[list[int]], top_k: int, images: list | None = None, capture: bool = False
    ) -> dict[str, torch.Tensor] | None:
        """Teacher-forced top-k logprobs at every position of every prompt."""
        ids_parts, lp_parts = [], []
        for g, group in enumerate(batch_groups(prompts)):
            group_prompts = [prompts[i] for i in group]
            kv_ops = self.save_prefixes(group_prompts)
            logits, _ = self.prefill(
                group_prompts,
                list(range(len(group))),
                self._group_images(images, group),
                kv_ops,
                capture=capture and g == 0,
                reuse=False,
            )
            self.wait_for_connector([("saved", prefix_key(p)) for _, p in kv_ops.get("save", [])])
            if logits is not None:
                lp, tk = torch.log_softmax(logits.float(), dim=-1).topk(top_k, dim=-1)
                ids_parts.append(tk.cpu())
                lp_parts.append(lp.cpu())
        if not self.ctx.is_last_stage:
            return None
        if not prompts:
            ids_parts, lp_parts = [torch.empty(0, top_k, dtype=torch.int64)], [torch.empty(0, top_k)]
        offsets = torch.tensor([0] + [len(p) for p in prompts], dtype=torch.int64).cumsum(0)
        return {"topk_ids": torch.cat(ids_parts), "topk_logprobs": torch.cat(lp_parts), "offsets": offsets}

    @staticmethod
    def _group_images(images: list | None, group: Sequence[int]) -> list | None:
        """The pixels of a batch's images, in token order (None entries are text-only)."""
        if images is None:
            return None
        return [load_image(images[i]) for i in group if images[i] is not None]

    def run_greedy(
        self, prompts: list[list[int]], max_new_tokens: int, top_k: int, images: list | None = None
    ) -> dict[str, torch.Tensor] | None:
        """Prefill, then decode until each prompt has exactly max_new_tokens argmax tokens
        (no EOS stop); the top-k of each chosen token's step is kept. Prefixes a cache
        holds are reused, not recomputed; with speculative decoding a step may emit
        several tokens of a sequence (speculative.py), the same tokens."""
        # per prompt: tokens, (top-k ids, logprobs) per token
        out: list[tuple[list[int], list]] = []
        for group in batch_groups(prompts):
            group_prompts = [prompts[i] for i in group]
            lens = [len(p) for p in group_prompts]
            seqs: list[list[int]] = [[] for _ in group]
            tops: list[list] = [[] for _ in group]
            logits, cached = self.prefill(group_prompts, list(range(len(group))), self._group_images(images, group))
            last_rows = torch.tensor([n - c for n, c in zip(lens, cached)]).cumsum(0) - 1
            rows = None if logits is None else logits[last_rows.to(logits.device)]
            self._take(rows, [[r] for r in range(len(group))], [[] for _ in group], seqs, tops, top_k)
            decode = self._speculative_step if self.speculate else self._decode_step
            while any(len(seq) < max_new_tokens for seq in seqs):
                decode(group_prompts, seqs, tops, top_k, max_new_tokens)
            out += list(zip(seqs, tops))
        if not self.ctx.is_last_stage:
            return None
        shape = (len(prompts), max_new_tokens, top_k)
        if not prompts:
            return {
                "tokens": torch.empty(shape[:2], dtype=torch.int64),
                "topk_ids": torch.empty(shape, dtype=torch.int64),
                "topk_logprobs": torch.empty(shape),
            }
        return {
            "tokens": torch.tensor([seq for seq, _ in out], dtype=torch.int64),
            "topk_ids": torch.stack([torch.stack([ids for ids, _ in top]) for _, top in out]),
            "topk_logprobs": torch.stack([torch.stack([lps for _, lps in top]) for _, top in out]),
        }

    def _decode_step(self, prompts, seqs, tops, top_k: int, max_new_tokens: int) -> None:
        """One plain decode step: every sequence's last token at its next position."""
        ids = [seq[-1] for seq in seqs]
        positions = [len(p) + len(seq) - 1 for p, seq in zip(prompts, seqs)]
        logits = self.step(ids, positions, list(range(len(seqs))))
        self._take(logits, [[r] for r in range(len(seqs))], [[] for _ in seqs], seqs, tops, top_k)

    def _speculative_step(self, prompts, seqs, tops, top_k: int, max_new_tokens: int) -> None:
        """One verification step: each unfinished sequence's last token and its n-gram
        drafts (never more than it still needs), verified by the target's greedy choices."""
        active = [i for i, seq in enumerate(seqs) if len(seq) < max_new_tokens]
        drafts = {i: speculative.propose(prompts[i] + seqs[i])[: max_new_tokens - len(seqs[i]) - 1] for i in active}
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        rows: list[list[int]] = []
        for i in active:
            fed = [seqs[i][-1]] + drafts[i]
            start = len(prompts[i]) + len(seqs[i]) - 1
            rows.append(list(range(len(ids), len(ids) + len(fed))))
            ids += fed
            positions += range(start, start + len(fed))
            slots += [i] * len(fed)
        logits = self.step(ids, positions, slots)
        self.spec_stats["steps"] += 1
        self.spec_stats["proposed"] += sum(len(d) for d in drafts.values())
        trusted = [self.trust_first_draft or (self.trust_after_hit and self.restored.get(i, 0) > 0) for i in active]
        taken = self._take(
            logits, rows, [drafts[i] for i in active], [seqs[i] for i in active], [tops[i] for i in active], top_k, trusted
        )
        self.spec_stats["accepted"] += sum(n - 1 for n in taken)

    def _take(
        self, logits, rows: list[list[int]], drafts: list[list[int]], seqs, tops, top_k: int, trusted: list[bool] | None = None
    ) -> list[int]:
        """Each sequence's tokens from its rows of the step's logits (the driver decides
        how many drafts the target keeps, then every rank gets the tokens), appended to
        `seqs`, and on the last stage their top-k to `tops`. Returns how many each took."""
        width = 1 + max((len(d) for d in drafts), default=0)
        chosen, picks = None, []
        if logits is not None:
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            choices = logprobs.argmax(dim=-1).tolist()
            trusted = trusted or [False] * len(drafts)
            picks = [speculative.emitted(d, [choices[r] for r in rs], t) for d, rs, t in zip(drafts, rows, trusted)]
            chosen = torch.tensor([p + [-1] * (width - len(p)) for p in picks], dtype=torch.int64).flatten()
            lp, tk = logprobs.topk(top_k, dim=-1)
            for pick, rs, top in zip(picks, rows, tops):
                top += [(tk[r].cpu(), lp[r].cpu()) for r in rs[: len(pick)]]
        shared = self.share_tokens(chosen, len(seqs) * width)
        counts = []
        for s, seq in enumerate(seqs):
            tokens = [t for t in shared[s * width : (s + 1) * width] if t != -1]
            seq += tokens
            counts.append(len(tokens))
        return counts

    def run_generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        stop: list[list[int]],
        eos_token_id: int | None,
        images: list | None = None,
    ) -> dict[str, torch.Tensor] | None:
        """Greedy generation with the `generate` stop rule (harness/contract/runbrief.py), batched
        for evals: groups of up to MAX_GEN_SEQS_PER_BATCH sequences (generate_groups),
        each prefilled in chunks of whole prompts (batch_groups), then decoded while any
        of its sequences runs; a stopped sequence leaves the decode batch. Every rank
        holds the shared tokens (share_tokens), so every rank takes the same stop
        decisions and runs the same steps. Prefixes a cache holds are reused; the KV
        connector saves nothing here."""
        seqs: list[list[int]] = [[] for _ in prompts]

        def running(i: int) -> bool:
            return len(seqs[i]) < max_new_tokens and not stop_reached(seqs[i], stop, eos_token_id)

        for group in generate_groups(prompts, max_new_tokens) if max_new_tokens > 0 else []:
            slot_of = {i: s for s, i in enumerate(group)}
            for chunk in batch_groups([prompts[i] for i in group]):
                members = [group[j] for j in chunk]
                member_prompts = [prompts[i] for i in members]
                logits, cached = self.prefill(member_prompts, [slot_of[i] for i in members], self._group_images(images, members))
                last_rows = torch.tensor([len(p) - c for p, c in zip(member_prompts, cached)]).cumsum(0) - 1
                chosen = None if logits is None else self._argmax(logits[last_rows.to(logits.device)])
                for i, t in zip(members, self.share_tokens(chosen, len(members))):
                    seqs[i].append(t)
            active = [i for i in group if running(i)]
            while active:
                ids = [seqs[i][-1] for i in active]
                positions = [len(prompts[i]) + len(seqs[i]) - 1 for i in active]
                logits = self.step(ids, positions, [slot_of[i] for i in active])
                chosen = None if logits is None else self._argmax(logits)
                for i, t in zip(active, self.share_tokens(chosen, len(active))):
                    seqs[i].append(t)
                active = [i for i in active if running(i)]
        if not self.ctx.is_last_stage:
            return None
        return EngineOutputs.generate_fields(seqs, max_new_tokens)

    @staticmethod
    def _argmax(logits: torch.Tensor) -> torch.Tensor:
        """The greedy choice, as run_greedy takes it (argmax of the float32 logprobs)."""
        return torch.log_softmax(logits.float(), dim=-1).argmax(dim=-1)
