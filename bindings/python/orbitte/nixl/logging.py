"""NIXL's logging module (``nixl.logging``): loggers under "nixl".

get_logger(name) returns the logger "nixl.<name without leading underscores>";
the "nixl" logger writes to stdout at INFO, NIXL_LOG_LEVEL (TRACE, DEBUG,
INFO, WARN, ERROR, FATAL) sets its level, as in NIXL.
"""

import logging
import logging.config
import os

_configured = False

LOGGING_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "simpleFormatter": {
            "format": "%(asctime)s NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s",
            "datefmt": "%Y-%m-%d %H:%M:%S",
        }
    },
    "handlers": {
        "consoleHandler": {
            "class": "logging.StreamHandler",
            "level": "INFO",
            "formatter": "simpleFormatter",
            "stream": "ext://sys.stdout",
        }
    },
    "loggers": {"nixl": {"level": "INFO", "handlers": ["consoleHandler"], "propagate": False}},
}

_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
           "FATAL": logging.CRITICAL}


def set_log_level_by_env(nixl_logger: logging.Logger) -> None:
    env = os.getenv("NIXL_LOG_LEVEL")
    if not env:
        return
    level = _LEVELS.get(env.upper())
    if level is None:
        nixl_logger.warning("Invalid NIXL_LOG_LEVEL value '%s'. Using configuration default.",
                            env)
        return
    nixl_logger.setLevel(level)


def setup_logging() -> None:
    global _configured
    if _configured:
        return
    logging.config.dictConfig(LOGGING_CONFIG)
    set_log_level_by_env(logging.getLogger("nixl"))
    _configured = True


def get_logger(name: str) -> logging.Logger:
    setup_logging()
    return logging.getLogger(f"nixl.{name.lstrip('_')}")
