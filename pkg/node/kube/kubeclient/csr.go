package kubeclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// csrPath is where the API keeps CertificateSigningRequests.
const csrPath = "/apis/certificates.k8s.io/v1/certificatesigningrequests"

// CSR is a CertificateSigningRequest: the fields a signer decides on, and
// the object as the API sent it, which an update sends back.
type CSR struct {
	Name, ResourceVersion string
	SignerName            string
	// Request is the PEM certificate request.
	Request []byte
	Usages  []string
	// Who asked for it, as the API authenticated them.
	Username, UID string
	Groups        []string
	Extra         map[string][]string
	// ExpirationSeconds is the lifetime asked for; 0 when none.
	ExpirationSeconds int64
	// Approved, Denied and Failed are the status's true conditions.
	Approved, Denied, Failed bool
	// Certificate is the issued PEM certificate, once there is one.
	Certificate []byte

	raw map[string]any
}

// csrJSON is the part of the object CSR decodes.
type csrJSON struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Request           []byte              `json:"request"`
		SignerName        string              `json:"signerName"`
		Usages            []string            `json:"usages"`
		Username          string              `json:"username"`
		UID               string              `json:"uid"`
		Groups            []string            `json:"groups"`
		Extra             map[string][]string `json:"extra"`
		ExpirationSeconds int64               `json:"expirationSeconds"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		Certificate []byte `json:"certificate"`
	} `json:"status"`
}

// decodeCSR reads one CertificateSigningRequest object.
func decodeCSR(b []byte) (CSR, error) {
	var j csrJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return CSR{}, err
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return CSR{}, err
	}
	c := CSR{
		Name: j.Metadata.Name, ResourceVersion: j.Metadata.ResourceVersion,
		SignerName: j.Spec.SignerName, Request: j.Spec.Request, Usages: j.Spec.Usages,
		Username: j.Spec.Username, UID: j.Spec.UID, Groups: j.Spec.Groups, Extra: j.Spec.Extra,
		ExpirationSeconds: j.Spec.ExpirationSeconds, Certificate: j.Status.Certificate, raw: raw,
	}
	for _, cond := range j.Status.Conditions {
		if cond.Status != "True" {
			continue
		}
		switch cond.Type {
		case "Approved":
			c.Approved = true
		case "Denied":
			c.Denied = true
		case "Failed":
			c.Failed = true
		}
	}
	return c, nil
}

// CSRs lists the CertificateSigningRequests, with the list's resource
// version to watch from.
func (c *Client) CSRs(ctx context.Context) ([]CSR, string, error) {
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := c.get(ctx, csrPath, &list); err != nil {
		return nil, "", fmt.Errorf("list certificate signing requests: %w", err)
	}
	out := make([]CSR, 0, len(list.Items))
	for _, it := range list.Items {
		csr, err := decodeCSR(it)
		if err != nil {
			return nil, "", fmt.Errorf("list certificate signing requests: %w", err)
		}
		out = append(out, csr)
	}
	return out, list.Metadata.ResourceVersion, nil
}

// csrWatchSeconds is how long one watch of the requests lasts on the
// server's side: within the client's Timeout, which bounds every call.
const csrWatchSeconds = 10

// WatchCSRs watches the CertificateSigningRequests from resource version
// rv and calls fn with each one added or changed, as the API tells of it.
// It returns the resource version to watch on from when the server ends
// the watch (after csrWatchSeconds); ErrGone when rv is too old to watch
// from (list again).
func (c *Client) WatchCSRs(ctx context.Context, rv string, fn func(CSR)) (string, error) {
	u := c.server.JoinPath(csrPath)
	u.RawQuery = url.Values{
		"watch": {"true"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {strconv.Itoa(csrWatchSeconds)},
	}.Encode()
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return rv, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return rv, fmt.Errorf("watch certificate signing requests: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return rv, &StatusError{Method: http.MethodGet, URL: u.String(), Code: resp.StatusCode, Status: resp.Status, Body: strings.TrimSpace(string(b))}
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, 64<<20))
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, nil
			}
			if ctx.Err() != nil {
				return rv, ctx.Err()
			}
			return rv, fmt.Errorf("watch certificate signing requests: %w", err)
		}
		switch ev.Type {
		case "ERROR":
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(ev.Object, &st)
			if st.Code == http.StatusGone {
				return rv, fmt.Errorf("watch certificate signing requests from %s: %w: %s", rv, ErrGone, st.Message)
			}
			return rv, fmt.Errorf("watch certificate signing requests: %d %s", st.Code, st.Message)
		case "BOOKMARK":
			var m struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if json.Unmarshal(ev.Object, &m) == nil && m.Metadata.ResourceVersion != "" {
				rv = m.Metadata.ResourceVersion
			}
		case "ADDED", "MODIFIED":
			csr, err := decodeCSR(ev.Object)
			if err != nil {
				return rv, fmt.Errorf("watch certificate signing requests: %w", err)
			}
			rv = csr.ResourceVersion
			fn(csr)
		case "DELETED":
			if csr, err := decodeCSR(ev.Object); err == nil {
				rv = csr.ResourceVersion
			}
		}
	}
}

// ApproveCSR adds a true Approved condition to csr (its /approval), as
// the controller manager's approver does, and returns the request as the
// API now has it. A request changed since it was read is ErrConflict.
func (c *Client) ApproveCSR(ctx context.Context, csr CSR, reason, message string) (CSR, error) {
	obj, status := withOwnStatus(csr.raw)
	conds, _ := status["conditions"].([]any)
	status["conditions"] = append(conds, map[string]any{
		"type": "Approved", "status": "True", "reason": reason, "message": message,
	})
	var out json.RawMessage
	if err := c.do(ctx, http.MethodPut, csrPath+"/"+url.PathEscape(csr.Name)+"/approval", obj, &out); err != nil {
		return CSR{}, fmt.Errorf("approve certificate signing request %s: %w", csr.Name, err)
	}
	return decodeCSR(out)
}

// IssueCSR sets csr's certificate (its /status), as a signer does. A
// request changed since it was read is ErrConflict.
func (c *Client) IssueCSR(ctx context.Context, csr CSR, certPEM []byte) error {
	obj, status := withOwnStatus(csr.raw)
	status["certificate"] = certPEM // []byte: base64 in JSON, as the API wants
	if err := c.do(ctx, http.MethodPut, csrPath+"/"+url.PathEscape(csr.Name)+"/status", obj, nil); err != nil {
		return fmt.Errorf("issue the certificate of request %s: %w", csr.Name, err)
	}
	return nil
}

// CanCreateCSRs asks the API (a SubjectAccessReview) whether the user who
// made csr may create certificate signing requests' subresource (nodeclient,
// selfnodeclient): the controller manager's approver asks the same.
func (c *Client) CanCreateCSRs(ctx context.Context, csr CSR, subresource string) (bool, error) {
	review := map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
		"spec": map[string]any{
			"user": csr.Username, "uid": csr.UID, "groups": csr.Groups, "extra": csr.Extra,
			"resourceAttributes": map[string]any{
				"group": "certificates.k8s.io", "resource": "certificatesigningrequests",
				"verb": "create", "subresource": subresource, "version": "*",
			},
		},
	}
	var out struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	if err := c.do(ctx, http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", review, &out); err != nil {
		return false, fmt.Errorf("review whether %s may create %s requests: %w", csr.Username, subresource, err)
	}
	return out.Status.Allowed, nil
}

// withOwnStatus copies a decoded object for an update: its top level,
// and its status (made if it has none), which the caller may change
// without changing m.
func withOwnStatus(m map[string]any) (obj, status map[string]any) {
	obj = make(map[string]any, len(m))
	for k, v := range m {
		obj[k] = v
	}
	status = map[string]any{}
	if st, ok := m["status"].(map[string]any); ok {
		for k, v := range st {
			status[k] = v
		}
	}
	obj["status"] = status
	return obj, status
}
