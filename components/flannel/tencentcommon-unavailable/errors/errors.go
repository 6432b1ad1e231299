// Package errors holds the SDK error type that flannel's tencentvpc backend
// checks for (see ../../tencentvpc-unavailable/go.mod).
package errors

// TencentCloudSDKError is an error reported by the Tencent Cloud API.
type TencentCloudSDKError struct{ Code, Message string }

func (e *TencentCloudSDKError) Error() string { return e.Code + ": " + e.Message }
