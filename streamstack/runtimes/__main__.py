from streamstack.runtimes.command import main

raise SystemExit(main())
