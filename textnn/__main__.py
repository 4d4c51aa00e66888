from textnn.cli import main

raise SystemExit(main())
