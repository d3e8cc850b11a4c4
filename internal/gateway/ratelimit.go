package gateway

import (
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/canopy-dev/canopy/internal/problem"
)

// rateLimits are the gateway's two request limits, each a 429 problem
// with Retry-After: per client address, checked before the token is read
// so that a flood of bad tokens costs little, and per token subject.
type rateLimits struct {
	cfg       *Config
	byAddress *limiter
	bySubject *limiter
}

func newRateLimits(cfg *Config) *rateLimits {
	return &rateLimits{cfg: cfg,
		byAddress: newLimiter(cfg.PreAuthRatePerSecond, cfg.PreAuthBurst, cfg.Now),
		bySubject: newLimiter(cfg.RatePerSecond, cfg.RateBurst, cfg.Now)}
}

// checkAddress takes one request of r's client address (clientKey).
func (l *rateLimits) checkAddress(r *http.Request) error {
	ok, wait := l.byAddress.allow(clientKey(r, l.cfg.TrustForwardedFor))
	if ok {
		return nil
	}
	prob := problem.New(http.StatusTooManyRequests, problem.RateLimited,
		"this client address is over %g requests/s (burst %d); retry after the Retry-After seconds", l.cfg.PreAuthRatePerSecond, l.cfg.PreAuthBurst)
	prob.RetryAfter = wait
	return prob
}

// checkSubject takes one request of a token subject.
func (l *rateLimits) checkSubject(subject string) error {
	ok, wait := l.bySubject.allow(subject)
	if ok {
		return nil
	}
	prob := problem.New(http.StatusTooManyRequests, problem.RateLimited,
		"token subject %q is over %g requests/s (burst %d); retry after the Retry-After seconds", subject, l.cfg.RatePerSecond, l.cfg.RateBurst)
	prob.RetryAfter = wait
	return prob
}

// limiter is a token bucket (golang.org/x/time/rate) per key, a token
// subject or a client address, on the injected clock, so that one key
// cannot starve the others.
type limiter struct {
	mu    sync.Mutex
	limit rate.Limit
	burst int
	now   func() time.Time
	// max bounds the keys remembered; maxBuckets.
	max     int
	buckets map[string]*rate.Limiter
}

// maxBuckets bounds a limiter's memory.
const maxBuckets = 100_000

func newLimiter(perSecond float64, burst int, now func() time.Time) *limiter {
	return &limiter{limit: rate.Limit(perSecond), burst: burst, now: now, max: maxBuckets, buckets: map[string]*rate.Limiter{}}
}

// allow takes one token of key's bucket; when there is none it says how
// long until there will be.
func (l *limiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.max {
			l.evict(now)
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	r := b.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		// Refused: the token is given back, so that a client retrying too
		// early does not push its own Retry-After further out.
		r.CancelAt(now)
		return false, min(wait, time.Hour)
	}
	return true, 0
}

// evict makes room: buckets that have refilled (idle keys) are forgotten,
// which loses nothing; if that frees less than a quarter, arbitrary others
// too (their keys start again with a full burst), so that the next
// evictions are that many insertions away and memory stays bounded
// whatever the keys. l.mu is held.
func (l *limiter) evict(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets {
		if len(l.buckets) <= l.max*3/4 {
			break
		}
		delete(l.buckets, k)
	}
}

// clientKey is the pre-authentication limiter's key for r: the remote
// address's IP (an IPv6 address's /64, which one host usually holds whole),
// or with trustForwardedFor the last address of X-Forwarded-For, the one
// the proxy in front of the gateway added (earlier ones are the client's
// say). An address that does not parse is its own key.
func clientKey(r *http.Request, trustForwardedFor bool) string {
	if trustForwardedFor {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			last := xff[len(xff)-1]
			last = strings.TrimSpace(last[strings.LastIndexByte(last, ',')+1:])
			if a, ok := parseAddr(last); ok {
				return addrKey(a)
			}
		}
	}
	if a, ok := parseAddr(r.RemoteAddr); ok {
		return addrKey(a)
	}
	return r.RemoteAddr
}

// parseAddr reads an IP with or without a port.
func parseAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	return a, err == nil
}

func addrKey(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		return netip.PrefixFrom(a, 64).Masked().String()
	}
	return a.String()
}
