"""What the model sees: composition and untrusted-data labelling."""

from tether.context.composer import Composer
from tether.context.untrusted import Observation, wrap_untrusted

__all__ = ["Composer", "Observation", "wrap_untrusted"]
