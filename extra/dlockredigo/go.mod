module github.com/dlockio/dlock/extra/dlockredigo

go 1.26.0

replace github.com/dlockio/dlock => ../..

require (
	github.com/dlockio/dlock v0.0.0
	github.com/gomodule/redigo v1.9.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
