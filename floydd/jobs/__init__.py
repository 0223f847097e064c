"""The job pipeline, one road on a box alone as in a cluster (DESIGN §5b "One road per job").

    service     JobService: submit, list, read, stop, delete, restart (any node)
    leader      ClusterScheduler: the leader places queued jobs with the pure place()
    decide      decide(): what this node must do about a job (pure, no I/O)
    reconcile   Reconciler: carries decide() out (records, inputs, runtime, reports)
    local       LocalJobs: this node's records, logs, outputs, and its history
    gang        torchrun over several boxes: commands, rendezvous, environment
    codesnap    the code folder's snapshot into the store
"""
