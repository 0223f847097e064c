"""Node-to-node traffic (HTTPS with mutual TLS) and finding the other boxes."""
