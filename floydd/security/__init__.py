"""Identity and trust of a cluster: the CA, node certificates, join tokens, mutual TLS.

    ca.py        ClusterCA: the cluster's CA key and certificate; signs node certificates
    identity.py  NodeIdentity: this node's id, key, certificate and CA; init_cluster
    tokens.py    TokenStore, parse_token: one-time join tokens that pin the CA fingerprint
    tls.py       SSL contexts for node-to-node mTLS, peer_node_id, the /cluster/v1/ guard
    join.py      the join exchange: server handlers and the pin-first client
    beneath.py   descriptor-relative, no-symlink paths (openat2 RESOLVE_BENEATH): how root reads,
                 writes, chowns and removes inside trees a job or a person controls

Import the submodule you need; this package imports nothing, so ``floydd.security.tokens``
does not drag in aiohttp.
"""
