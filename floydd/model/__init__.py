"""The job model: the plain typed values every layer shares, and their parsers.

One home for what a job *is*, so the CLI, the API, the replicated state, the records and
the runtime agree without validating twice: job keys, job states and the moves between
them, the spec a job runs with (command, code, data mounts, resources, params), dataset
names and references, and the parsers of ``--data``, ``--param`` and names. It imports
nothing of ours but :mod:`floydd.errors` (and nothing heavy at all: the agent and the CLI
load it too). Values are frozen dataclasses; the API decodes request bodies into them with
msgspec, which also draws their JSON schemas for ``/v1/openapi.json``.

One module per concept, each importing only those above it:

- ``defaults``: every default a job gets when nobody says otherwise;
- ``states``: job states and the moves between them (the state diagram is there);
- ``names``: project and dataset names, job keys, dataset references, absolute paths;
- ``mounts``: data mounts (``--data``), as asked and as resolved, and the mount points refused;
- ``params``: ``--param KEY=VALUE``;
- ``resources``: what a job asks for on each box, and sizes and counts as people write them;
- ``restart``: restart policies and the durations they are written in;
- ``spec``: the spec a job runs with and its stored form;
- ``job``: a job as the cluster keeps it, typed, and its placement's parts (where each runs, on which GPUs);
- ``run``: one run of a job on a box, as that box's records keep it;
- ``submission``: the request bodies that make a job (a submission, a restart's changes);
- ``gangcommand``: what the command of a job over several boxes may be (torchrun's rendezvous is floydd's);
- ``order``: how a list of jobs is sorted and filtered (the API's ``sort`` and ``q``, the TUI's jobs screen);
- ``view``: a job as the API answers it and the CLI and the TUI read it (:class:`JobView`), not the cluster's record.

Every name is imported from here (``from floydd.model import JobKey``), not from its module.
"""

from __future__ import annotations

import importlib

from floydd.model.states import (ACTIVE_STATES, FINAL_STATES, OPEN_STATES, REQUEUE, RUN_OUTCOMES, STATES, STOP_OUTCOMES,
                                 TRANSITIONS, UNSUCCESSFUL_STATES, WAITING_STATES, JobState, check_state,
                                 check_transition)
from floydd.model.names import (DATASET_PATTERN, MAX_PATH, PROJECT_PATTERN, DatasetRef, JobKey, check_abs_path,
                                check_dataset_name, check_project, check_upload_name, parse_job_key, parse_ref)
from floydd.model.mounts import (MAX_MOUNTS, WORKSPACE_NAMES, Mount, MountRequest, check_mount_target, check_mounts,
                                 parse_data)
from floydd.model.params import MAX_PARAM_VALUE, MAX_PARAMS, check_params, parse_param
from floydd.model.resources import (MAX_CPUS, MAX_GPUS, MAX_MEMORY, MAX_NODES, Resources, asked_gpu_count, asked_nodes,
                                    asked_per_box, check_cpus,
                                    describe_needs, format_cpus, format_size, known_count, parse_size)
from floydd.model.defaults import (DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_ENV, DEFAULT_LOST_AFTER, DEFAULT_MAX_ATTEMPTS,
                                   DEFAULT_MODE, DEFAULT_RESTART, DEFAULT_STOP_GRACE)
from floydd.model.restart import MAX_ATTEMPTS, MAX_LOST_AFTER, RESTART_POLICIES, RestartPolicy, parse_duration
from floydd.model.spec import RECORD_FIELDS, SPEC_FIELDS, JobSpec
from floydd.model.job import Job, JobPart, unsettled_on
from floydd.model.run import Run
from floydd.model.submission import (CODE_UPLOAD_PATTERN, ENVIRONMENTS, MAX_COMMAND, MAX_MESSAGE, MAX_RUNTIME, Restart,
                                     Submission, check_max_runtime)
from floydd.model.gangcommand import check_gang_command
from floydd.model.order import (MAX_FILTER, SORTS, STATE_ORDER, JobOrder, filter_text, job_text, matching, ordered,
                                run_seconds)

__all__ = [
    "STATES", "FINAL_STATES", "ACTIVE_STATES", "OPEN_STATES", "WAITING_STATES", "UNSUCCESSFUL_STATES", "RUN_OUTCOMES",
    "STOP_OUTCOMES", "TRANSITIONS", "REQUEUE", "check_state", "check_transition",
    "PROJECT_PATTERN", "DATASET_PATTERN", "check_project", "check_dataset_name", "check_upload_name",
    "MAX_PATH", "check_abs_path",
    "JobKey", "parse_job_key", "DatasetRef", "parse_ref",
    "MountRequest", "Mount", "parse_data", "check_mounts", "check_mount_target", "WORKSPACE_NAMES",
    "parse_param", "check_params", "Resources", "JobSpec", "Job", "JobPart", "unsettled_on", "Run", "Submission", "SPEC_FIELDS", "ENVIRONMENTS",
    "check_cpus", "asked_per_box", "asked_gpu_count", "asked_nodes", "known_count", "parse_size", "format_size",
    "format_cpus", "describe_needs",
    "MAX_CPUS", "MAX_MEMORY",
    "MAX_NODES", "MAX_GPUS", "MAX_COMMAND", "MAX_MESSAGE", "MAX_PARAMS", "MAX_PARAM_VALUE", "MAX_MOUNTS", "Restart",
    "MAX_RUNTIME", "check_max_runtime", "RECORD_FIELDS", "RestartPolicy", "RESTART_POLICIES",
    "DEFAULT_MAX_ATTEMPTS", "DEFAULT_RESTART", "DEFAULT_LOST_AFTER", "DEFAULT_ENV", "DEFAULT_MODE",
    "DEFAULT_CHECKPOINT_INTERVAL", "DEFAULT_STOP_GRACE", "MAX_ATTEMPTS", "MAX_LOST_AFTER", "parse_duration",
    "CODE_UPLOAD_PATTERN", "check_gang_command", "JobState",
    "SORTS", "STATE_ORDER", "MAX_FILTER", "JobOrder", "filter_text", "job_text", "matching", "ordered", "run_seconds",
    "JobView", "PartView", "ResourcesView", "MetricView", "EventView", "RestartView",
]

_VIEWS = frozenset({"JobView", "PartView", "ResourcesView", "MetricView", "EventView", "RestartView"})


def __getattr__(name: str) -> object:
    """The job view types (:mod:`floydd.model.view`) are made when first asked for: ``floyd``
    starts without building them (six dataclasses cost it about 6 ms)."""
    if name in _VIEWS:
        return getattr(importlib.import_module("floydd.model.view"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
