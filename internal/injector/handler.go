package injector

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxReviewBytes bounds one AdmissionReview request body. The API server
// sends the whole pod; Kubernetes objects are at most 1.5 MiB in etcd.
const MaxReviewBytes = 3 << 20

// Handler serves the webhook: POST an admission.k8s.io/v1 AdmissionReview
// of a pod, get the AdmissionReview answer with a JSONPatch (or none).
type Handler struct {
	Defaults Defaults
	Logger   *slog.Logger
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "spool injector: POST an AdmissionReview (this is a Kubernetes admission webhook)", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxReviewBytes+1))
	if err != nil {
		http.Error(w, "spool injector: reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > MaxReviewBytes {
		http.Error(w, fmt.Sprintf("spool injector: AdmissionReview over %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("spool injector: the body is not an admission.k8s.io/v1 AdmissionReview with a request (%v)", err), http.StatusBadRequest)
		return
	}
	resp := h.review(review.Request)
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
