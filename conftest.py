# Here so pytest puts the checkout's root on sys.path (tests import tests.kit). The scenario
# items come from the harness's pytest plugin, which its install registers (pytest11).
