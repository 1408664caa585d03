module github.com/fencegate/fencegate/examples/stripe

go 1.26.8

require (
	github.com/fencegate/fencegate/client v0.0.0
	github.com/fencegate/fencegate/domain v0.0.0
	github.com/stripe/stripe-go/v82 v82.5.1
)

require golang.org/x/text v0.44.0 // indirect

replace (
	github.com/fencegate/fencegate/client => ../../client
	github.com/fencegate/fencegate/domain => ../../domain
)
