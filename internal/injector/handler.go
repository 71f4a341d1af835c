package injector

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxReviewBytes is the default bound of one AdmissionReview request body:
// the API server's own limit on a request body (3 MiB), which is the most a
// pod it forwards can be (etcd then stores at most 1.5 MiB).
const MaxReviewBytes = 3 << 20

// Handler serves the webhook: POST an admission.k8s.io/v1 AdmissionReview
// of a pod, get the AdmissionReview answer with a JSONPatch (or none).
// NewServer puts it behind the limits every request must pass first.
type Handler struct {
	Defaults Defaults
	Logger   *slog.Logger
	// MaxBytes bounds the body; 0 = MaxReviewBytes.
	MaxBytes int64
	metrics  *metrics
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "spool injector: POST an AdmissionReview (this is a Kubernetes admission webhook)", http.StatusMethodNotAllowed)
		return
	}
	limit := h.MaxBytes
	if limit <= 0 {
		limit = MaxReviewBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		h.refused("too_large")
		http.Error(w, fmt.Sprintf("spool injector: AdmissionReview over %d bytes", limit), http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		h.refused("bad_request")
		http.Error(w, "spool injector: reading the request failed", http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		h.refused("bad_request")
		http.Error(w, fmt.Sprintf("spool injector: the body is not an admission.k8s.io/v1 AdmissionReview with a request (%v)", err), http.StatusBadRequest)
		return
	}
	resp := h.review(review.Request)
	if h.metrics != nil {
		h.metrics.reviews.WithLabelValues(outcomeOf(resp)).Inc()
	}
	resp.UID = review.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	}
	b, err := json.Marshal(out)
	if err != nil {
		http.Error(w, "spool injector: encoding the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// review decides one request. Anything but a pod being created is let
// through unchanged (the webhook configuration asks only for those).
func (h *Handler) review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		return allow
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(fmt.Sprintf("spool injector: the pod in the request does not decode: %v", err))
	}
	// The request's namespace is the API server's; the object's may be
	// empty or anything.
	pod.Namespace = req.Namespace
	res, err := Inject(&pod, h.Defaults)
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	if err != nil {
		h.log().Info("pod refused", "namespace", req.Namespace, "pod", name, "err", err)
		return deny(err.Error())
	}
	allow.Warnings = res.Warnings
	if len(res.Patch) == 0 {
		return allow
	}
	patch, err := json.Marshal(res.Patch)
	if err != nil {
		return deny("spool injector: encoding the patch: " + err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	allow.Patch, allow.PatchType = patch, &pt
	h.log().Info("sidecar injected", "namespace", req.Namespace, "pod", name)
	return allow
}

func (h *Handler) refused(reason string) {
	if h.metrics != nil {
		h.metrics.refused.WithLabelValues(reason).Inc()
	}
}

func outcomeOf(r *admissionv1.AdmissionResponse) string {
	switch {
	case !r.Allowed:
		return "denied"
	case len(r.Patch) > 0:
		return "injected"
	}
	return "unchanged"
}

func (h *Handler) log() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}

func deny(msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Message: msg, Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity,
	}}
}
