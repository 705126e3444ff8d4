"""The SSH transport (:mod:`remote.ssh.transport`; being split into modules by concern)."""

from .transport import (
    AUTH_TIMEOUT,
    CHANNEL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_KEEPALIVE,
    SSH_CONFIG_ENV,
    SSHConfigFiles,
    SSHTarget,
    SSHTransport,
    config_path,
    load_ssh_config,
    log,
    parse_spec,
    resolve_target,
    wrap_command,
)
