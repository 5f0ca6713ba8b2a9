"""A hub model at a pinned revision, through huggingface_hub's own cache.

The cache is huggingface_hub's (HF_HOME / HF_HUB_CACHE), so a model downloaded once by
any tool is found offline afterwards. The cache is asked first; the hub only when the
cache lacks the revision and the machine is not offline (HF_HUB_OFFLINE).
"""

from __future__ import annotations

from pathlib import Path


class HubUnavailable(Exception):
    pass


def snapshot(repo: str, revision: str) -> Path:
    """The local snapshot directory of `repo` at `revision`."""
    from huggingface_hub import constants, snapshot_download

    try:
        return Path(snapshot_download(repo, revision=revision, local_files_only=True))
    except Exception as cached_exc:
        # not in the cache (huggingface_hub raises several kinds)
        if constants.HF_HUB_OFFLINE:
            raise HubUnavailable(
                _not_cached(repo, revision, constants.HF_HUB_CACHE, "offline: HF_HUB_OFFLINE is set", cached_exc)
            ) from None
        try:
            return Path(snapshot_download(repo, revision=revision))
        except Exception as exc:
            raise HubUnavailable(_not_cached(repo, revision, constants.HF_HUB_CACHE, "the hub cannot be reached", exc)) from None


def _not_cached(repo: str, revision: str, cache: str, why: str, exc: Exception) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"hub model '{repo}' at revision '{revision}' is not in the huggingface_hub cache ({cache}) and "
        f"{why} ({first}). Fetch it where there is network (`hf download {repo} --revision {revision}`) "
        "and copy the cache here, or set HF_HOME to a cache that has it."
    )
