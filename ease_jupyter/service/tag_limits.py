"""The limits on a user's own tags of a task (``Service.set_tags``): one
place for the service that enforces them and the OpenAPI document that
states them."""

MAX_TAGS_PER_TASK = 100  # her own tags on one task (the easeml.* ones are the service's)
MAX_TAG_KEY_CHARS = 128
MAX_TAG_VALUE_CHARS = 4096
CONTROL_CHARACTERS = r"[\x00-\x1f\x7f-\x9f]"  # refused in keys and values (C0, DEL, C1)
