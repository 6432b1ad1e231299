// The Tencent Cloud VPC SDK that flannel's tencentvpc backend imports is not
// on the Go module proxy, so flannel cannot be built as published. This
// module stands in for it with the few types that backend names; every call
// fails. Terrarium's flannel uses the vxlan backend and never selects
// tencentvpc.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.22
