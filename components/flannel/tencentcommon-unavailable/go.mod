// Stands in for the Tencent Cloud SDK's common module, which is not on the
// Go module proxy; see ../tencentvpc-unavailable/go.mod.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common

go 1.22
