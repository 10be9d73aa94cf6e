"""Host names, ports and network interfaces, as initialize() reads them."""

import errno
import os
import re
import socket


def _split_host_port(hostport):
    """("host", port or None) of "host", "host:port", "[v6]" or "[v6]:port"."""
    s = hostport.strip()
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?", s)
    if m:
        return m.group(1), int(m.group(2)) if m.group(2) else None
    if s.count(":") == 1:
        host, port = s.split(":")
        return host, int(port) if port.isdigit() else None
    return s, None  # a bare name, IPv4 or unbracketed IPv6 address


def _join_host_port(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _resolve(host):
    """An IP address literal for host (itself when it is one)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return host
        except OSError:
            pass
    return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]


def _bind_error(ip, port):
    """Why binding ip:port fails now ("the port is in use", ...), for a
    message that names the port."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return f"port {port} is in use (another process listens on it)"
        return f"{e.strerror or e}"
    return "it could not be bound when the engine tried"


def _net_interfaces():
    try:
        return set(os.listdir("/sys/class/net"))
    except OSError:
        return set()
