"""The shared checks of this folder's tests fail with pytest's detailed assertion messages, as in a test module."""

import pytest

pytest.register_assert_rewrite("rewrite_checks")
