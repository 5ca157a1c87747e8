import sys

from kafkaops.cli.main import main

sys.exit(main())
