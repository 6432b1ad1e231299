// Package cisbench checks a node against the CIS Kubernetes Benchmark's
// control-plane, etcd and worker-node sections by reading the node's own
// files and the command lines of its running programs: what a plant's
// security review asks for, on the node itself and offline.
//
// Each check is the benchmark's by number; its title here is a short
// paraphrase. The benchmark marks some checks "Manual" because no one
// setting decides them; where a node's files and flags do, they are
// checked here too, and where they do not, the result is "not
// applicable" with the reason (docs/security.md lists every check).
package cisbench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Benchmark is the version checked: the newest, which covers Kubernetes
// 1.32 to 1.34 (none covers the node's 1.36 yet).
const Benchmark = "CIS Kubernetes Benchmark v1.12.0"

// Status is a check's outcome.
type Status string

// The outcomes.
const (
	Pass          Status = "pass"
	Fail          Status = "fail"
	NotApplicable Status = "n/a"
)

// Result is one check's outcome on a node.
type Result struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// Automated is the benchmark's own marking (Automated, or Manual).
	Automated bool   `json:"automated"`
	Status    Status `json:"status"`
	// Detail is what was found: the file and its mode, the flag and its
	// value; on a fail, what to change; for n/a, why.
	Detail string `json:"detail"`
}

// Role is which of the benchmark's sections apply to a node.
type Role string

// The roles.
const (
	// ControlPlane runs kube-apiserver, the controller manager, the
	// scheduler and etcd (kubeadm's stacked etcd): sections 1 to 4.
	ControlPlane Role = "control-plane"
	// Worker runs only a kubelet and kube-proxy: section 4.
	Worker Role = "worker"
)

// Report is every check's result on a node.
type Report struct {
	Benchmark string   `json:"benchmark"`
	Role      Role     `json:"role"`
	Results   []Result `json:"results"`
}

// Count is how many results have status s.
func (r Report) Count(s Status) int {
	n := 0
	for _, res := range r.Results {
		if res.Status == s {
			n++
		}
	}
	return n
}

// Summary is one line: the benchmark, the role and the counts.
func (r Report) Summary() string {
	return fmt.Sprintf("%s, %s: %d pass, %d fail, %d not applicable",
		r.Benchmark, r.Role, r.Count(Pass), r.Count(Fail), r.Count(NotApplicable))
}

// Write draws the report as a table, failures marked, the summary last.
func (r Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var err error
	printf := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(tw, format, a...)
		}
	}
	section := ""
	for _, res := range r.Results {
		if s := sectionOf(res.ID); s != section {
			if section != "" {
				printf("\n")
			}
			section = s
			printf("%s\t%s\n", s, sectionTitles[s])
		}
		mark := "  "
		if res.Status == Fail {
			mark = "✗ "
		}
		kind := ""
		if !res.Automated {
			kind = " (manual)"
		}
		printf("%s%s\t%s\t%s%s\t%s\n", mark, res.ID, res.Status, res.Title, kind, res.Detail)
	}
	printf("\n%s\n", r.Summary())
	if err != nil {
		return err
	}
	return tw.Flush()
}

// sectionOf is the section a check belongs to: "1.2" of "1.2.14", "2"
// of "2.3".
func sectionOf(id string) string {
	parts := strings.Split(id, ".")
	if len(parts) <= 2 {
		return parts[0]
	}
	return strings.Join(parts[:2], ".")
}

var sectionTitles = map[string]string{
	"1.1": "Control plane node configuration files",
	"1.2": "API server",
	"1.3": "Controller manager",
	"1.4": "Scheduler",
	"2":   "etcd",
	"3.2": "Logging",
	"4.1": "Worker node configuration files",
	"4.2": "Kubelet",
	"4.3": "kube-proxy",
}

// Run checks the node at h (its root, its /proc) and returns every
// check's result. A control plane is a node with kube-apiserver's static
// pod manifest; on a worker sections 1 to 3 are not applicable.
func Run(ctx context.Context, h *host.Host) (Report, error) {
	return run(ctx, h, ids{0, 0})
}

func run(ctx context.Context, h *host.Host, root ids) (Report, error) {
	n, err := load(h, root)
	if err != nil {
		return Report{}, err
	}
	role := Worker
	if _, err := n.stat(manifestsDir + "/" + apiServer + ".yaml"); err == nil {
		role = ControlPlane
	}
	r := Report{Benchmark: Benchmark, Role: role}
	for _, c := range checks() {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		res := Result{ID: c.id, Title: c.title, Automated: c.automated}
		v := verdict{status: NotApplicable, detail: "a worker runs no control plane"}
		if role == ControlPlane || c.everyNode {
			v = c.run(n)
		}
		res.Status, res.Detail = v.status, v.detail
		r.Results = append(r.Results, res)
	}
	return r, nil
}
