package lifecycle

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// HTTPServer is an actor serving srv on ln, which the caller opened before
// the group starts (so that a taken port is reported at once). With
// srv.TLSConfig holding a certificate it serves HTTPS. Stopped, it shuts
// srv down gracefully, waiting up to grace for requests in flight.
func HTTPServer(name string, srv *http.Server, ln net.Listener, grace time.Duration) Actor {
	return Actor{
		Name: name,
		Run: func(context.Context) error {
			var err error
			if srv.TLSConfig != nil && (len(srv.TLSConfig.Certificates) > 0 || srv.TLSConfig.GetCertificate != nil) {
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		},
		Stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			if srv.Shutdown(ctx) != nil {
				srv.Close()
			}
		},
	}
}
