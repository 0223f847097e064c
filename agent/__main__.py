"""``python -m floydd.agent WORKSPACE``: supervise the job described by WORKSPACE/spec.json."""

import sys

from floydd.agent.supervisor import main

sys.exit(main(sys.argv[1:]))
