"""A module that leaves a thread running when imported: a rank pool zygote that
preloads it must refuse to fork (a fork keeps only the calling thread)."""

import threading
import time

threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
