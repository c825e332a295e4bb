"""`faultproxy init`'s proposals: what an observe run saw, generalised (starter), and the files
written from it (init_files).

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.proposals.starter import observe_run
    from faultproxy.evaluator.proposals.init_files import starter_files, write_starter

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
