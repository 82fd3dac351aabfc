# on-pty.py CMD [ARG...]: run CMD with a fresh pseudo-terminal (24 rows, 80 columns) as its
# stdin, its output collected on stderr; succeed only if CMD succeeded and the terminal kept its
# settings and window size and got nothing written to it (tests/integration/sandbox_limits.sh).
import fcntl
import os
import struct
import subprocess
import sys
import termios

m, s = os.openpty()
fcntl.ioctl(m, termios.TIOCSWINSZ, struct.pack('HHHH', 24, 80, 0, 0))
before = termios.tcgetattr(s)
p = subprocess.run(sys.argv[1:], stdin=s, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
sys.stderr.write(p.stdout.decode(errors='replace'))
after = termios.tcgetattr(s)
ws = struct.unpack('HHHH', fcntl.ioctl(s, termios.TIOCGWINSZ, b'\0' * 8))
os.set_blocking(m, False)
try:
    seen = os.read(m, 4096)
except BlockingIOError:
    seen = b''
print('exit', p.returncode, '; settings kept:', before == after, '; size', ws[:2],
      '; the terminal got', seen, file=sys.stderr)
sys.exit(not (p.returncode == 0 and before == after and ws[:2] == (24, 80) and seen == b''))
