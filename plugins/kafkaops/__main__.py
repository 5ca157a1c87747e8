import sys

from kafkaops.cli import main

sys.exit(main())
