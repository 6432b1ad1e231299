// Package v20170312 stands in for the Tencent Cloud VPC API client that
// flannel's tencentvpc backend imports (see go.mod). Every request fails
// with ErrUnavailable.
package v20170312

import "errors"

// ErrUnavailable is returned by every call.
var ErrUnavailable = errors.New("the tencentvpc backend is not available in Terrarium's flannel build; use the vxlan backend")

// Client is the API client; it holds nothing.
type Client struct{}

// NewClientWithSecretId returns a client whose every call fails.
func NewClientWithSecretId(secretID, secretKey, region string) (*Client, error) {
	return &Client{}, ErrUnavailable
}

// Filter selects route tables.
type Filter struct {
	Name   *string
	Values []*string
}

// Route is one route of a route table.
type Route struct {
	RouteId              *uint64
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteType            *string
	Enabled              *bool
}

// RouteTable is a VPC route table.
type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

// DescribeRouteTablesRequest asks for route tables.
type DescribeRouteTablesRequest struct{ Filters []*Filter }

// DescribeRouteTablesResponse answers it.
type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

// DeleteRoutesRequest deletes routes.
type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// DeleteRoutesResponse answers it.
type DeleteRoutesResponse struct{}

// CreateRoutesRequest creates routes.
type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// CreateRoutesResponse answers it.
type CreateRoutesResponse struct{}

// NewDescribeRouteTablesRequest returns an empty request.
func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}

// NewDeleteRoutesRequest returns an empty request.
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }

// NewCreateRoutesRequest returns an empty request.
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

// DescribeRouteTables fails with ErrUnavailable.
func (*Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, ErrUnavailable
}

// DeleteRoutes fails with ErrUnavailable.
func (*Client) DeleteRoutes(*DeleteRoutesRequest) (*DeleteRoutesResponse, error) {
	return nil, ErrUnavailable
}

// CreateRoutes fails with ErrUnavailable.
func (*Client) CreateRoutes(*CreateRoutesRequest) (*CreateRoutesResponse, error) {
	return nil, ErrUnavailable
}
