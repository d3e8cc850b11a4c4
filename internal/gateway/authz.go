package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/canopy-dev/canopy/internal/problem"
)

// authorize checks that p may touch run: the token names the run, or one of
// its sessions is the run's session (as the run's owner projector knows it).
func (g *Gateway) authorize(ctx context.Context, p *Principal, run string) error {
	_, err := g.authorizeSession(ctx, p, run)
	return err
}

// authorizeSession is authorize that also returns the run's session when
// the token covers the run only through it ("" when it names the run).
func (g *Gateway) authorizeSession(ctx context.Context, p *Principal, run string) (string, error) {
	if p.CoversRun(run) {
		return "", nil
	}
	// One answer whether the run is unknown, expired, or in a session the
	// token does not name: whether a run exists is for those it is for.
	notCovered := problem.New(http.StatusForbidden, problem.Forbidden, "the token of %q does not cover run %q", p.Subject, run)
	if len(p.Sessions) == 0 {
		return "", notCovered
	}
	session, err := g.runSession(ctx, run) // reads.go
	if err != nil {
		var prob *problem.Problem
		if errors.As(err, &prob) && (prob.Type == problem.UnknownRun || prob.Type == problem.RunExpired) {
			return "", notCovered
		}
		return "", err
	}
	if !p.CoversSession(session) {
		return "", notCovered
	}
	return session, nil
}
