"""The environment a job (or an environment build) starts with: an allow-list, never the
daemon's environment.

From the daemon's environment only these pass (site settings a job needs to run)::

    LANG LANGUAGE LC_*          the locale
    TZ                          the time zone
    CUDA_* NCCL_* NVIDIA_*      GPU and collective-communication settings of the box
                                (CUDA_VISIBLE_DEVICES is then set by floydd)
    job_env_pass (config)       names the site adds, e.g. HTTPS_PROXY or LD_LIBRARY_PATH

Then the job's own values: the thread counts of its maths libraries (:func:`threads_env`),
``--param`` values (which may replace them; and a gang's torchrun settings), the
``FLOYD_BOX``/``FLOYD_ATTEMPT`` fencing tags (:mod:`floydd.runtime.fence`); then, set by
floydd and not overridable: ``PATH`` (the job's Python first, then SANE_PATH), ``HOME`` (a
folder of the job's own), ``TMPDIR``, ``FLOYD_JOB``, ``FLOYD_CODE``/``FLOYD_INPUT``/
``FLOYD_OUTPUT``, ``CUDA_VISIBLE_DEVICES`` (empty without GPUs), ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
``PYTHONUNBUFFERED=1``. Nothing else: a secret the daemon's shell held (``AWS_SECRET_ACCESS_KEY``,
``FLOYD_TOKEN``...) never reaches a job.
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = ["PASSED", "PASSED_PREFIXES", "SANE_PATH", "FIXED", "THREAD_VARS", "passed", "agent_env", "pass_list",
           "extra_from", "threads_env"]

PASSED = ("LANG", "LANGUAGE", "TZ")
PASSED_PREFIXES = ("LC_", "CUDA_", "NCCL_", "NVIDIA_")
SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FIXED = ("PATH", "HOME", "TMPDIR", "FLOYD_JOB", "FLOYD_CODE", "FLOYD_INPUT", "FLOYD_OUTPUT",
         "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONUNBUFFERED")
"""Set by floydd for every job; neither the daemon's environment nor ``--param`` changes them."""
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""How PyTorch, NumPy and their BLAS are told how many threads to start (each starts one per
core of the box otherwise: two such jobs on a box then spin against each other, several times
slower than one thread each)."""
_AGENT_EXTRA = "FLOYDD_JOB_ENV_PASS"
"""How the daemon hands ``job_env_pass`` to the agent (the agent reads no config)."""


def pass_list(text: str | None) -> tuple[str, ...]:
    """``job_env_pass`` as names: comma- or space-separated; ``NAME*`` passes a prefix."""
    return tuple(w for w in (text or "").replace(",", " ").split() if w)


def passed(base: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``base`` (the daemon's environment) that the allow-list lets through."""
    names = set(PASSED)
    prefixes = list(PASSED_PREFIXES)
    for word in extra:
        if word.endswith("*"):
            if word[:-1]:
                prefixes.append(word[:-1])
        else:
            names.add(word)
    return {k: v for k, v in base.items()
            if (k in names or k.startswith(tuple(prefixes))) and not k.upper().startswith("FLOYD")}


def agent_env(base: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """What the agent (daemon code, trusted) starts with: the allow-list, plus what running
    floydd's own Python needs (``PATH``, ``PYTHONPATH``) and the site's extra names."""
    env = passed(base, extra)
    for name in ("PATH", "PYTHONPATH"):
        if base.get(name):
            env[name] = base[name]
    extra = tuple(extra)
    if extra:
        env[_AGENT_EXTRA] = " ".join(extra)
    return env


def threads_env(cpus: float, gpus: int) -> dict[str, str]:
    """:data:`THREAD_VARS` for a job that asked for ``cpus`` cores on its box and holds ``gpus``
    GPUs there: the cores shared among its GPUs (torchrun starts a process for each), at least
    one. Nothing when it asked for no cores (a spec from before ``--cpu``, or ``--cpu 0``):
    the libraries then choose, as outside floydd."""
    if cpus <= 0:
        return {}
    threads = str(max(1, int(cpus // max(1, gpus))))
    return dict.fromkeys(THREAD_VARS, threads)


def extra_from(base: Mapping[str, str]) -> tuple[str, ...]:
    """In the agent: the site's extra names the daemon passed."""
    return pass_list(base.get(_AGENT_EXTRA))
