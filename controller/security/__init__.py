"""Authentication and authorization: TLS settings, principals from certificates,
ACL values and the authorizer. Pure except `tls` (reads key files) and `certs`
(writes them)."""
