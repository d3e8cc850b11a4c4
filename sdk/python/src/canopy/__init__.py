"""canopy: send your agents' events to canopy and take its wakes, from Python.

    import canopy
    from canopy import events

    with canopy.Producer("127.0.0.1:9092", source="/apps/my-agents") as p:
        p.send(events.tree_node_created(run_id="run-1", agent_id="conductor", role="conductor"))

canopy.events has one builder per event type of the contract (docs/CONTRACT.md); Producer
validates, keys and partitions them as canopy requires; Conductor consumes wakes with the
semantics of canopy's Go library pkg/wake.
"""
from . import events
from ._contract import CONTRACT_SHA256, SCHEMA_VERSION, __version__
from ._errors import CanopyError, ConfigError, DeliveryError, HandlerError, ValidationError
from ._event import CONTENT_TYPE, Event, ack_id, format_time
from ._partition import murmur2, partition
from ._schema import validate
from .conductor import Conductor, Wake
from .producer import Producer, topic_names

__all__ = [
    "CONTENT_TYPE", "CONTRACT_SHA256", "SCHEMA_VERSION", "CanopyError", "Conductor", "ConfigError", "DeliveryError",
    "Event", "HandlerError", "Producer", "ValidationError", "Wake", "__version__", "ack_id", "events", "format_time",
    "murmur2", "partition", "topic_names", "validate",
]
