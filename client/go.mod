module github.com/fencegate/fencegate/client

go 1.26.8

require github.com/fencegate/fencegate/domain v0.0.0

require golang.org/x/text v0.44.0 // indirect

replace github.com/fencegate/fencegate/domain => ../domain
