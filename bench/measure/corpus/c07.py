import logging, warnings, traceback
logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')
log = logging.getLogger('x'); log.info('hello %d', 3)
warnings.warn('careful')
try:
    1 / 0
except ZeroDivisionError:
    print(traceback.format_exc().splitlines()[-1])
