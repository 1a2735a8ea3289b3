from monitor.cli import main

raise SystemExit(main())
