package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/lifecycle"
	"github.com/canopy-dev/canopy/pkg/telemetry"
)

// servers are the API and the admin endpoint (nil without
// -metrics-addr), listening before the group starts: a taken port is
// reported at once.
type servers struct {
	api, admin     *http.Server
	apiLn, adminLn net.Listener
	ready          lifecycle.Readiness
}

func listen(o options, gw *gateway.Gateway, reg *prometheus.Registry) (*servers, error) {
	log := o.cfg.Logger
	s := &servers{}
	var err error
	if s.apiLn, err = net.Listen("tcp", o.addr); err != nil {
		return nil, fmt.Errorf("-listen: %w", err)
	}
	// Headers have 10s to arrive and a body has the gateway's BodyTimeout
	// (set per request: a server-wide ReadTimeout would also end the wake
	// streams' contexts). A response has writeTimeout, longer than the
	// longest a request can wait (checked with the flags); a wake stream
	// sets a deadline per write instead.
	s.api = &http.Server{Handler: gw, TLSConfig: o.httpTLS, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: writeTimeout,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	// Wake streams hold their connection: ending the gateway's context ends
	// them, so that Shutdown does not wait for them forever.
	s.api.RegisterOnShutdown(gw.Drain)
	if o.metricsAddr == "" {
		return s, nil
	}
	if s.adminLn, err = net.Listen("tcp", o.metricsAddr); err != nil {
		s.apiLn.Close()
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	s.admin = &http.Server{Handler: gateway.AdminHandler(telemetry.Handler(reg), readyCheck(&s.ready, gw)),
		ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	return s, nil
}

// actors is the group, in its stop order (lifecycle's package doc): not
// ready first, so that load balancers stop sending requests while the API
// drains; the API; the admin endpoint last, so that metrics stay
// scrapeable until the end. A dead admin listener ends the process too.
func (s *servers) actors(signals lifecycle.Actor, log *slog.Logger) *lifecycle.Group {
	g := &lifecycle.Group{Logger: log}
	g.Add(signals)
	g.Add(s.ready.Actor())
	g.Add(lifecycle.HTTPServer("api", s.api, s.apiLn, 20*time.Second))
	if s.admin != nil {
		g.Add(lifecycle.HTTPServer("admin endpoint", s.admin, s.adminLn, 5*time.Second))
	}
	return g
}

// adminAddr is the admin endpoint's address, empty without one.
func (s *servers) adminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// close closes the listeners, for a return before the servers ran.
func (s *servers) close() {
	s.apiLn.Close()
	if s.adminLn != nil {
		s.adminLn.Close()
	}
}

// readyCheck is /readyz's: the process is up and not shutting down, and the
// gateway reaches Kafka.
func readyCheck(ready *lifecycle.Readiness, gw *gateway.Gateway) func(context.Context) error {
	return func(ctx context.Context) error {
		if !ready.Ready() {
			return errors.New("not serving")
		}
		return gw.Ready(ctx)
	}
}
