"""Jobs on this node: submission, the queue, and the link between placement and the runtime."""
