"""The store's keys: sealing objects, key epochs and re-sealing under a new key."""
